# Shared by the Python binding's tests: run by ctest on the build's interpreter (HYDRO_PYTHON) with PYTHONPATH at the
# build's python/ directory (tests/CMakeLists.txt). A missing part (the binding, torch, numpy)
# fails the import, so the test fails; nothing here skips.
import os
import random
import socket
import subprocess
import sys
import time

import pytest

from forkserver import spawn

HERE = os.path.dirname(os.path.abspath(__file__))


def wait_for(what, timeout=60, poll=0.001):
    """Until what() is true; fails the test after `timeout` seconds (a hang, never a slow machine)."""
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll)


def free_port():
    """A MASTER_PORT for a rendezvous of ranks that the test starts, free now with the two after it
    (hydro's ranks' store and restart group take MASTER_PORT + 1 and + 2). All three lie in
    10000-19999: below the kernel's ephemeral range, where a connection's local port (gloo's, another
    test's) could take one between this check and the ranks' bind, and below the ports hydro derives
    for Slurm jobs (20000 on). The pick is random, so tests running side by side do not pick the same."""
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(10000, 19998)
        if all(bindable(p) for p in range(port, port + 3)):
            return port
    raise AssertionError("no three free TCP ports side by side in 10000-19999")


def bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def committed(ck):
    """The names of the checkpoints committed in the directory ck (step-N, N zero-padded), oldest first."""
    return sorted(n for n in os.listdir(ck) if n.startswith("step-"))


def step_of(name):
    """N of the checkpoint named step-N."""
    return int(name.split("-")[1])


def hydro_env(extra=None):
    """The environment for a child python: this one without HYDRO_*/Slurm settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HYDRO_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(extra or {})
    return env


def rank_env(rank, ranks, port, ckpt_dir, extra=None):
    """hydro_env for rank `rank` of `ranks` as torchrun starts one on this host (its rendezvous at
    127.0.0.1:port), checkpointing to ckpt_dir, its output unbuffered."""
    return hydro_env({"RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), "HYDRO_CKPT_DIR": str(ckpt_dir), "PYTHONUNBUFFERED": "1",
                      **(extra or {})})


def run_example(cmd, ckpt_dir, until=None, signals=()):
    """Runs an example's command with HYDRO_CKPT_DIR=ckpt_dir; with `until`, sends the first of
    `signals` once a 'step N' line with N >= until was printed, and each next one once hydro logged
    the pause the one before asked for (at an operator or a step's end). Returns (exit status, output)."""
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
              env=hydro_env({"HYDRO_CKPT_DIR": str(ckpt_dir)}))
    out, pending = [], list(signals)
    for line in p.stdout:
        out.append(line)
        due = until is not None and line.startswith("step ") and int(line.split()[1]) >= until
        if pending and (due or (until is None and "paused at " in line)):
            until = None
            os.kill(p.pid, pending.pop(0))
    return p.wait(timeout=300), "".join(out)


def weights_digest(output):
    """The one 'weights_digest=' an example printed at its end."""
    lines = [l for l in output.splitlines() if l.startswith("weights_digest=")]
    assert len(lines) == 1, output[-3000:]
    return lines[0].split("=", 1)[1]


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
