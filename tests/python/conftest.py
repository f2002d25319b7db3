# Shared by the Python binding's tests: run by ctest on the build's interpreter (HYDRO_PYTHON) with PYTHONPATH at the
# build's python/ directory (tests/CMakeLists.txt). A missing part (the binding, torch, numpy)
# fails the import, so the test fails; nothing here skips.
import os
import socket
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def wait_for(what, timeout=60, poll=0.001):
    """Until what() is true; fails the test after `timeout` seconds (a hang, never a slow machine)."""
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll)


def free_port():
    """A TCP port free on 127.0.0.1 now: for a rendezvous of ranks that the test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hydro_env(extra=None):
    """The environment for a child python: this one without HYDRO_*/Slurm settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HYDRO_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(extra or {})
    return env


@pytest.fixture
def env(monkeypatch):
    """Clears the settings a Runtime reads; the test sets what it needs."""
    for k in list(os.environ):
        if k.startswith(("HYDRO_", "SLURM_")) or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            monkeypatch.delenv(k)
    return monkeypatch


@pytest.fixture
def python():
    return sys.executable
