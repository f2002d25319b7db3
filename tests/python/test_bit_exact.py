# A job stopped by SIGTERM at random steps, paused and resumed, and rerun until it finishes, ends
# with the weights and buffers of a run never interrupted, bit for bit. The signals go to the whole
# process group, DataLoader workers included, as Slurm sends them.
import os
import random
import signal
import subprocess
import time

import hydro
from conftest import HERE, hydro_env

SCRIPT = os.path.join(HERE, "train_cnn.py")
STEPS = 48  # train_cnn.py: 3 epochs of 16 batches


def attempt(python, env, digest, stop_at=None, pause_at=None):
    """Runs the script once; SIGTERM to its group after step `stop_at`. Returns (status, last step).
    The signal lands in one of the 3 steps after `stop_at`, as this process reads the output: the
    script holds at the third until the signal is sent (TRAIN_CNN_HOLD)."""
    sent_flag = os.path.join(os.path.dirname(digest), "signal-sent")
    if stop_at is not None:
        env = dict(env, TRAIN_CNN_HOLD=f"{sent_flag}:{min(stop_at + 3, STEPS - 1)}")
        if os.path.exists(sent_flag):
            os.unlink(sent_flag)
    p = subprocess.Popen([python, SCRIPT, digest], env=env, stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    last, sent = 0, False
    for line in p.stdout:
        if line.startswith("step "):
            last = int(line.split()[1])
            if last == pause_at:
                os.killpg(p.pid, signal.SIGUSR1)
                time.sleep(0.3)
                os.killpg(p.pid, signal.SIGUSR2)
            if stop_at is not None and last >= stop_at and not sent:
                os.killpg(p.pid, signal.SIGTERM)
                sent = True
                open(sent_flag, "w").close()
    status = p.wait(timeout=300)
    gone_by = time.monotonic() + 60
    while time.monotonic() < gone_by:  # no worker outlives its parent
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"processes of group {p.pid} outlived the training process")
    return status, last


def test_resumed_weights_are_bit_identical(python, tmp_path):
    ref = tmp_path / "ref.sha"
    status, last = attempt(python, hydro_env(), str(ref))
    assert (status, last) == (0, STEPS)

    env = hydro_env({"HYDRO_CKPT_DIR": str(tmp_path / "ckpt")})
    got = tmp_path / "got.sha"
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    stops = [rng.randrange(2, 12), rng.randrange(16, 26), rng.randrange(30, 40)]  # apart: each attempt gets one
    print(f"SIGTERM after steps {stops} (seed {seed})")
    resumed_at = 0
    for i, stop in enumerate(stops):
        stop = max(stop, resumed_at + 2)  # an exit may land a step or two after the signal
        status, last = attempt(python, env, str(got), stop_at=stop, pause_at=resumed_at + 1 if i == 1 else None)
        assert status == hydro.EXIT_REQUEUE, f"attempt {i} exited {status}"
        assert last >= stop
        resumed_at = last
    status, last = attempt(python, env, str(got))
    assert (status, last) == (0, STEPS)
    assert got.read_text() == ref.read_text()
