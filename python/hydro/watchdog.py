"""hydro-launch's watchdog from Python: arm a timer around work that can hang, without
torch.distributed. The requests are torch elastic's FileTimerClient lines on the FIFO hydro-launch
--watchdog-file serves (HYDRO_WATCHDOG_FILE), so torch's own client keeps working on it too. When a
timer expires, hydro-launch kills the worker's whole process group and requeues the job.

    with hydro.watchdog.expires(after=600, scope="train step"):
        step()

Without hydro-launch --watchdog-file (no FIFO in the environment) the timers do nothing."""
import contextlib
import signal
import sys

from . import _C

_default = None


def client():
    """The client of $HYDRO_WATCHDOG_FILE (else $TORCHELASTIC_TIMER_FILE); disabled when neither is set."""
    global _default
    if _default is None:
        _default = _C.WatchdogClient()
    return _default


def make_client(fifo, sig=signal.SIGKILL):
    """A client of another FIFO, whose expiry sends `sig` (0: only logged)."""
    return _C.WatchdogClient(fifo, int(sig))


def _caller_scope():
    f = sys._getframe(3)
    return f"{f.f_code.co_filename}:{f.f_lineno}"


@contextlib.contextmanager
def expires(after, scope=None, client=None):
    """Arms the timer `scope` (default: the caller's file:line) to expire `after` seconds from now,
    and disarms it when the block ends. Raises OSError when nobody serves the FIFO, ValueError on a
    bad `after` or scope."""
    c = client or globals()["client"]()
    scope = scope or _caller_scope()
    c.arm(scope, float(after))
    try:
        yield
    finally:
        c.disarm(scope)
