# Issue 32, a signal at the program's last moment: a checkpoint-and-exit that hydro-launch is asked
# for (--requeue-signal, the time limit's margin) after the program's Runtime has closed. The
# training is over; the program is in its teardown. hydro-launch sends it nothing, and the job ends
# as it would have: before, the signal met the program with its handlers gone and killed it (143).
import os
import signal
import subprocess
import textwrap

from conftest import hydro_env, wait_for

LAUNCH = os.path.join(os.environ["HYDRO_BUILD_DIR"], "launcher", "hydro-launch")

PROGRAM = textwrap.dedent("""
    import os, sys, time
    import torch
    import hydro
    model = torch.nn.Linear(4, 4)
    rt = hydro.Runtime()
    rt.track("model", model)
    for step in range(1, 4):
        model(torch.ones(1, 4)).sum().backward()
        rt.step_end(step)
    rt.close()
    open(sys.argv[1], "w").close()
    # The teardown (a last save, an evaluation) lasts until the test has seen hydro-launch's answer.
    for _ in range(6000):
        if os.path.exists(sys.argv[2]):
            break
        time.sleep(0.01)
    print("teardown done", flush=True)
""")


def test_a_requeue_signal_after_the_runtime_closed_lets_the_program_finish(python, tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    closed, go, log = tmp_path / "closed", tmp_path / "go", tmp_path / "launch.err"
    answer = "runtime has closed (its training is over): no checkpoint to ask for"
    with open(log, "w") as err_file:
        p = subprocess.Popen([LAUNCH, "--requeue-signal", "USR1", "--", python, str(tmp_path / "program.py"), str(closed),
                              str(go)], env=hydro_env({"HYDRO_CKPT_DIR": str(tmp_path / "ckpt")}),
                             stdout=subprocess.PIPE, stderr=err_file, text=True)
    wait_for(closed.exists, timeout=300, poll=0.01)
    p.send_signal(signal.SIGUSR1)
    wait_for(lambda: answer in log.read_text() or p.poll() is not None, timeout=300, poll=0.01)
    go.touch()
    out, _ = p.communicate(timeout=300)
    err = log.read_text()
    assert answer in err, err
    assert (p.returncode, out) == (0, "teardown done\n"), err
