"""The training thread arms the pause itself.

hydro's C handler for a pause signal marks the pause pending at once, and its watcher thread then
registers the operator callback that blocks the next operator. On a busy machine that thread may
wait for a CPU, and the training thread runs on meanwhile. So, where a pause signal has no Python
handler, hydro installs one, before its C handler goes in: the C handler chains to the
interpreter's, and the main thread, at its next bytecode, arms the pause itself (_C.arm_pause_now;
arming twice is harmless). The watcher still arms it when the main thread runs no Python, for
example inside backward()."""
import signal
import threading

from . import _C

_took = []  # the signals whose Python handler is ours


def _may_set_handlers():
    """Python handlers may be set: on the main thread (the only one allowed to), while hydro's C
    handlers are out (setting one then would replace hydro's)."""
    return threading.current_thread() is threading.main_thread() and not _C.signal_handlers_installed()


def _arm(signum, frame):
    if _C.signal_handlers_installed():
        _C.arm_pause_now(signum)
    else:  # hydro's handlers went out (a Runtime closed on another thread): the default again
        uninstall()


def install():
    """Before hydro's C handlers go in (they chain to what they find): the Python handler for each
    pause signal that has none, when HYDRO_PAUSE is on. Only on the main thread, where Python runs
    handlers."""
    if not _may_set_handlers():
        return
    try:
        signals = _C.pause_signals()
    except RuntimeError:
        return  # bad settings: starting hydro's handlers raises the error that names them
    for s in signals:
        # Only a signal nobody handles: not one with a Python handler, nor one with a handler set
        # in C (faulthandler, an embedding program), which hydro's C handler chains to instead.
        if signal.getsignal(s) == signal.SIG_DFL and _C.signal_is_default(s):
            signal.signal(s, _arm)
            _took.append(s)


def uninstall():
    """Once hydro's C handlers are out: the default action again for the signals install() took."""
    if not _may_set_handlers():
        return
    while _took:
        s = _took.pop()
        if signal.getsignal(s) is _arm:
            signal.signal(s, signal.SIG_DFL)
