"""hydro's fork guard (python/fork_guard.c): a child forked while another thread holds CPython's
thread-state list lock starts as any child does. Before CPython 3.12 it would otherwise block in
PyOS_AfterFork_Child for good (python/cpython#112275). torch's Gloo threads take that lock without
the GIL after every collective, and a DataLoader forks its workers at each epoch's start: that is
how two-rank Lightning and transformers jobs of this suite hung, a worker blocked before its first
line and the training waiting for its batch."""
import os
import sys
import time

from hydro import _C

NEEDED = sys.version_info < (3, 12)  # later CPythons make the lock anew in the child first


def fork_exiting(code):
    pid = os.fork()
    if pid == 0:
        os._exit(code)
    return pid


def exit_code_within(pid, seconds):
    """The child's exit code, or None when it has not ended within SECONDS (it is then killed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_the_guard_is_on_where_cpython_needs_it():
    state = _C.fork_guard()
    assert state.startswith("on:" if NEEDED else "not needed:"), state


def test_a_child_forked_while_another_thread_holds_the_lock_starts():
    if not NEEDED:
        assert not _C._hold_thread_state_lock(0), "the lock is CPython's own business from 3.12"
        return
    assert _C._hold_thread_state_lock(200)  # a thread holds it, without the GIL, for 200 ms
    assert exit_code_within(fork_exiting(7), 120) == 7


def test_without_the_guard_that_child_never_starts():
    """The control: CPython's bug is there, so the test above tests the guard. A child that started
    would exit within milliseconds; this one never would."""
    if not NEEDED:
        return
    _C._set_fork_guard(False)
    try:
        assert _C._hold_thread_state_lock(3000)
        assert exit_code_within(fork_exiting(7), 2) is None
    finally:
        _C._set_fork_guard(True)
