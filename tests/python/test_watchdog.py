# hydro.watchdog.expires: a Python worker arms hydro-launch's watchdog without torch.distributed.
import os
import subprocess
import textwrap

import pytest

import hydro
from conftest import hydro_env

LAUNCH = os.path.join(os.environ["HYDRO_BUILD_DIR"], "launcher", "hydro-launch")

WORKER = textwrap.dedent("""
    import os, sys, time
    import hydro
    open(sys.argv[1], "w").write(str(os.getpid()))  # before the 1 s, which a loaded machine could use up
    with hydro.watchdog.expires(after=1, scope="hung step"):
        time.sleep(1000)
""")


def test_a_hung_python_worker_is_killed_by_hydro_launch(python, tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    r = subprocess.run([LAUNCH, "--watchdog-file", str(tmp_path / "timers"), "--", python, str(tmp_path / "worker.py"),
                        str(tmp_path / "pid")], env=hydro_env(), capture_output=True, text=True, timeout=300)
    pid = (tmp_path / "pid").read_text()
    assert f"watchdog expired: pid {pid} scope 'hung step'" in r.stderr, r.stderr
    assert f"sending SIGKILL to its process group {pid}" in r.stderr
    assert "hung and was killed; not in a Slurm job" in r.stderr
    assert r.returncode == hydro.EXIT_REQUEUE, r.stderr  # run again (no Slurm job to requeue here)


def test_a_timer_left_in_time_is_harmless(python, tmp_path):
    code = "import hydro\nwith hydro.watchdog.expires(after=30):\n    pass\nprint('done')"
    r = subprocess.run([LAUNCH, "--watchdog-file", str(tmp_path / "timers"), "--", python, "-c", code],
                       env=hydro_env(), capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout) == (0, "done\n"), r.stderr
    assert "watchdog expired" not in r.stderr


def test_without_hydro_launch_timers_do_nothing(env):
    env.delenv("TORCHELASTIC_TIMER_FILE", raising=False)
    c = hydro.watchdog.make_client("")
    with hydro.watchdog.expires(after=1, client=c):
        pass
    assert not c.enabled


def test_bad_timers_are_named(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    c = hydro.watchdog.make_client(str(tmp_path / "fifo"))
    with pytest.raises(OSError, match=str(tmp_path / "fifo")):
        c.arm("x", 5)  # nobody serves it
    with pytest.raises(ValueError, match="seconds"):
        c.arm("x", 0)
