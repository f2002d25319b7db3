# The tests' fork server (forkserver.py): a child forked by it runs as `python SCRIPT` would in a
# fresh interpreter, with its own argv, directory, environment and stdio; what a fresh interpreter
# would run otherwise is started by subprocess.Popen; and nothing the server started outlives the
# test process, even killed.
import os
import signal
import subprocess
import sys
import threading

import pytest

import forkserver
from conftest import HERE, hydro_env, wait_for
from forkserver import spawn

PROBE = os.path.join(HERE, "forked_probe.py")


def run(how, extra=None, cwd="/", **kwargs):
    """forked_probe.py HOW... by spawn and by subprocess.Popen: (the process, its output) of each."""
    env = hydro_env({"HYDRO_PROBE": "given", **(extra or {})})
    out = []
    for start in (spawn, subprocess.Popen):
        p = start([sys.executable, PROBE, *how], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  text=True, **kwargs)
        stdout, stderr = p.communicate(timeout=120)
        out.append((p, stdout, stderr))
    return out


def test_a_forked_child_sees_what_a_fresh_interpreter_would():
    (forked, out, _), (fresh, fresh_out, _) = run(["exit", "0"], cwd="/tmp")
    assert type(forked) is forkserver.Child and type(fresh) is subprocess.Popen
    assert out == fresh_out and "argv ['" + PROBE in out and "cwd /tmp" in out and "name __main__" in out, out
    (_, out, _), (_, fresh_out, _) = run(["exit", "0"], {"PYTHONUNBUFFERED": "1"})
    assert out == fresh_out and "stdout FileIO True" in out, out


def test_its_exit_status_is_a_fresh_interpreters():
    for how, status in ((["exit", "3"], 3), (["raise"], 1), (["signal"], -signal.SIGTERM)):
        (forked, _, err), (fresh, _, fresh_err) = run(how)
        assert type(forked) is forkserver.Child and forked.returncode == fresh.returncode == status, how
        assert ("RuntimeError: raised by the probe" in err) == (how == ["raise"]) == ("raised by the probe" in fresh_err)


def test_a_child_in_another_environment_is_forked_by_a_server_started_in_that_one():
    # A library reads its own variables at import (OpenMP, torch), so a child's may differ from
    # its server's only in hydro's, the ranks', PYTHONUNBUFFERED and PYTEST_CURRENT_TEST.
    (p, out, _), (_, fresh_out, _) = run(["exit", "0"], {"OTHER": "1"})
    assert type(p) is forkserver.Child and out == fresh_out and "env given 1" in out, out
    assert p.server is not run(["exit", "0"])[0][0].server


def test_what_a_fresh_interpreter_would_run_otherwise_is_not_forked():
    # HYDRO_PAUSE=on: hydro-autopause.pth acts at the interpreter's start.
    (p, out, _), (_, fresh_out, _) = run(["exit", "0"], {"HYDRO_PAUSE": "on"})
    assert type(p) is subprocess.Popen and out == fresh_out
    (p, _, _), _ = run(["exit", "0"], stdin=subprocess.PIPE)
    assert type(p) is subprocess.Popen


KILLED = f"""
import sys
sys.path.insert(0, {HERE!r})
from forkserver import spawn, servers
p = spawn([sys.executable, {PROBE!r}, "wait"], stdout=sys.stdout)
print("server", next(iter(servers.values())).process.pid, flush=True)
p.wait()
"""


def test_the_server_and_its_children_end_with_the_test_process_even_killed(tmp_path):
    test = subprocess.Popen([sys.executable, "-c", KILLED], env=hydro_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    raw = []  # every line, stderr's too, for the report of a failure (one under load, 5 Dec, hid its cause)
    threading.Thread(target=lambda: raw.extend(test.stdout), daemon=True).start()
    lines = lambda: {line.split()[0]: line.split()[1:] for line in list(raw) if line.split()}  # noqa: E731
    try:
        wait_for(lambda: {"pid", "server"} <= lines().keys(), timeout=120)
    except AssertionError:
        test.kill()  # its server then kills the child (its socket's end)
        pytest.fail(f"no child's and server's pids: exit status {test.poll()}, output {raw}")
    child, server = int(lines()["pid"][0]), int(lines()["server"][0])
    assert int(lines()["pid"][1]) == server, "the child is not the server's"
    test.kill()
    test.wait()
    wait_for(lambda: not alive(child) and not alive(server))


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
