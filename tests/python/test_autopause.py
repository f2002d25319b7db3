# Zero lines for pause: with HYDRO_PAUSE=on an unchanged script pauses at operators and resumes;
# without it, or in a program that never imports torch, hydro is not even loaded. These run
# the build's interpreter as a user would, from another directory and without PYTHONPATH: they need
# scripts/setup (or cmake --install) to have put hydro where that interpreter looks.
import os
import signal
import subprocess
import threading
import time

import conftest
from conftest import HERE, hydro_env


def plain_env(extra=None):
    env = hydro_env(extra)
    env.pop("PYTHONPATH", None)
    return env


def run_code(python, code, extra=None):
    out = subprocess.run([python, "-c", code], env=plain_env(extra), cwd="/", capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_hydro_works_from_any_directory(python):
    assert run_code(python, "import hydro; print(hydro.EXIT_REQUEUE)") == "75"


def test_nothing_is_loaded_unless_asked_or_torch_is_imported(python):
    probe = "import sys; print('_hydro_autopause' in sys.modules, 'hydro' in sys.modules)"
    assert run_code(python, probe) == "False False"
    assert run_code(python, probe, {"HYDRO_PAUSE": "off"}) == "False False"
    assert run_code(python, probe, {"HYDRO_PAUSE": "on"}) == "True False"  # waiting for torch
    assert run_code(python, "import torch; " + probe, {"HYDRO_PAUSE": "on"}) == "True True"


class Lines:
    """A child's stdout, read on a thread: the last "step N" seen."""

    def __init__(self, p):
        self.last, self.done = 0, False
        threading.Thread(target=self._read, args=(p,), daemon=True).start()

    def _read(self, p):
        for line in p.stdout:
            if line.startswith("step "):
                self.last = int(line.split()[1])
        self.done = True


def wait_for(what):
    conftest.wait_for(what, timeout=120, poll=0.01)  # a child's start under a loaded machine


def last_step(path):
    """The last "step N" a child wrote to its stdout, a file: each line it wrote is there at once, so
    what it wrote before it paused is all there when its pause is logged (no reader to catch up)."""
    steps = [line for line in open(path).read().splitlines() if line.startswith("step ")]
    return int(steps[-1].split()[1]) if steps else 0


def test_an_unchanged_script_pauses_and_resumes(python, tmp_path):
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = subprocess.Popen([python, os.path.join(HERE, "plain_train.py"), "3000"],
                             env=plain_env({"HYDRO_PAUSE": "on"}), cwd="/", stdout=out, stderr=err)
    wait_for(lambda: last_step(out_path) >= 20)
    p.send_signal(signal.SIGUSR1)
    wait_for(lambda: "paused at operator" in open(err_path).read())
    held = last_step(out_path)
    time.sleep(1.0)
    assert last_step(out_path) == held and p.poll() is None
    p.send_signal(signal.SIGUSR2)
    assert p.wait(timeout=300) == 0 and last_step(out_path) == 3000
    log = open(err_path).read()
    assert "pausing at operators (HYDRO_PAUSE=on)" in log and "resumed at operator" in log


def test_sigterm_keeps_its_default_in_an_unchanged_script(python):
    p = subprocess.Popen([python, os.path.join(HERE, "plain_train.py"), "100000"], env=plain_env({"HYDRO_PAUSE": "on"}),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = Lines(p)
    wait_for(lambda: lines.last >= 5)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == -signal.SIGTERM
