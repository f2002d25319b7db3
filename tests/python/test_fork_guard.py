"""hydro's fork guard (python/fork_guard.c): a child forked while another thread holds CPython's
thread-state list lock starts as any child does. On a CPython with python/cpython#112275 it would
otherwise block in PyOS_AfterFork_Child for good. torch's Gloo threads take that lock without the
GIL after every collective, and a DataLoader forks its workers at each epoch's start: that is how
a two-rank Lightning job of this suite hung, a worker blocked before its first line and the
training waiting for its batch. The lock's holder here lets go only once the fork waits for it (or
has forked, without the guard), so each test sees the same order every time."""
import os
import sys
import time

import pytest

from hydro import _C

FIXED = {8: 20, 9: 20, 10: 15, 11: 10}  # 3.8.20, ...: the releases that brought 3.12's fix back
V = sys.version_info
NEEDED = V.major == 3 and V.minor in FIXED and V.micro < FIXED[V.minor]
REACHABLE = V < (3, 12)  # the lock, as fork_guard.c reaches it


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
    if not REACHABLE:
        assert not _C._hold_thread_state_lock(0)
        return
    assert _C._hold_thread_state_lock(60000)  # a thread holds it, without the GIL
    pid = fork_exiting(7)
    assert _C._join_thread_state_lock_holder() == NEEDED  # the fork waited for it: the guard's doing
    assert exit_code_within(pid, 120) == 7


def test_without_the_guard_that_child_does_not_start():
    """The control: CPython's bug is there, so the test above tests the guard. The child's copy of
    the lock stays held whatever the time, so it is blocked at any later look; a started child
    would have exited within milliseconds."""
    if not NEEDED:
        return
    _C._set_fork_guard(False)
    try:
        assert _C._hold_thread_state_lock(60000)
        pid = fork_exiting(7)
        assert not _C._join_thread_state_lock_holder()  # let go after the fork, which did not wait
    finally:
        _C._set_fork_guard(True)
    code = exit_code_within(pid, 2)
    if code is not None:
        pytest.skip(f"this CPython {sys.version.split()[0]} has the fix, backported (the child exited {code})")
