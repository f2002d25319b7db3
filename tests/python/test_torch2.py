# What torch 2.x brings, on the main tier's torch (2.15; tests/CMakeLists.txt registers this file
# only for a torch 2 build):
#  - a torch.compile'd model (inductor, on the CPU: compiled_train.py) pauses at an operator its
#    compiled code dispatches and goes on exactly, then resumes from its checkpoint bit-for-bit;
#  - the files of a checkpoint that a user may open load with plain torch.load, whose default is
#    weights_only=True since torch 2.6.
# The compiled model runs in a child process: a thread paused inside compiled code may hold the
# GIL (inductor's allocations do not release it), and the test must be free to send the resume.
import glob
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

import hydro
from conftest import HERE, hydro_env, wait_for
from forkserver import spawn

SCRIPT = os.path.join(HERE, "compiled_train.py")
STEPS = 40
# Operators only the compiled code dispatches here: inductor's extern matmuls and its buffers (the
# eager code around it, the optimizer's step, dispatches none of them; eager Linear goes through
# aten::linear first).
COMPILED_OPS = ("aten::mm", "aten::addmm", "aten::empty_strided")


def run(python, env, stderr, on_step=None):
    """Runs compiled_train.py to its end or its exit; on_step(pid, n) after each step. Returns
    (exit status, digest or None)."""
    p = spawn([python, SCRIPT, str(STEPS)], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    digest = None
    for line in p.stdout:
        if line.startswith("step ") and on_step:
            on_step(p.pid, int(line.split()[1]))
        elif line.startswith("digest="):
            digest = line.strip().split("=", 1)[1]
    return p.wait(timeout=600), digest


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    d = tmp_path_factory.mktemp("uninterrupted")
    with open(d / "stderr", "w") as err:
        status, digest = run(sys.executable, hydro_env({"HYDRO_CKPT_DIR": str(d / "ck")}), err)
    assert status == 0 and digest, (d / "stderr").read_text()
    return digest


def test_a_compiled_model_pauses_in_its_compiled_code_then_resumes_from_its_checkpoint_bit_for_bit(python, tmp_path,
                                                                                                   uninterrupted):
    # One compiled run takes about 20 s here (dynamo, AOTAutograd and inductor in each process):
    # the pause and the checkpoint-and-exit share the first run, the resume is the second.
    err_path = tmp_path / "stderr"
    env = hydro_env({"HYDRO_CKPT_DIR": str(tmp_path / "ck")})
    sent = []

    def in_compiled_code(text):
        return any(f"paused at operator {op} " in text for op in COMPILED_OPS)

    def pause_then_stop(pid, n):
        # From step 5 (compiled, forward and backward, steps ago) until a pause lands at an operator
        # of the compiled code: one that comes as a step ends, or in the optimizer's step, lands
        # there. Then, from step 12, SIGTERM: a checkpoint at the step's end, and exit 75.
        text = err_path.read_text()
        if in_compiled_code(text):
            if n >= 12 and not sent:
                os.kill(pid, signal.SIGTERM)
                sent.append(n)
        elif n >= 5 and n % 2:
            time.sleep(random.uniform(0, 0.01))  # "step n" is printed just before its end: land later
            os.kill(pid, signal.SIGUSR1)
            wait_for(lambda: err_path.read_text().count("paused at") > text.count("paused at"), timeout=120)
            os.kill(pid, signal.SIGUSR2)

    with open(err_path, "w") as err:
        status, _ = run(python, env, err, pause_then_stop)
        text = err_path.read_text()
        assert in_compiled_code(text) and "resumed at operator" in text, text
        assert status == hydro.EXIT_REQUEUE, text
        status, digest = run(python, env, err)
    text = err_path.read_text()
    assert status == 0 and "resumed from" in text, text
    assert digest == uninterrupted, "a pause or the resume changed the compiled model's training"


def test_the_files_a_user_opens_load_with_weights_only(env, tmp_path):
    import numpy  # noqa: F401 (its generator's state is saved too)
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    loader = hydro.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 16)), batch_size=4, shuffle=True)
    with hydro.Runtime() as rt:
        for name, obj in (("model", model), ("optimizer", opt), ("scheduler", sched), ("loader", loader)):
            rt.track(name, obj)
        rt.resume()
        model(next(iter(loader))[0]).sum().backward()
        opt.step()
        sched.step()
        ck = rt.save(1)
    hydro.atomic_save(model.state_dict(), tmp_path / "weights.pt")
    files = sorted(glob.glob(os.path.join(ck, "*.pt"))) + [str(tmp_path / "weights.pt")]
    # rng.pt is libtorch's own C++ archive of torch's generators (torch.jit.load reads it): hydro
    # reads it back; a user has no need to open it.
    opened = [f for f in files if os.path.basename(f) != "rng.pt"]
    assert {os.path.basename(f) for f in opened} >= {"model.pt", "optimizer.pt", "scheduler.pt", "loader.pt",
                                                     hydro.Runtime.PYTHON_RNG + ".pt", "weights.pt"}
    for f in opened:
        torch.load(f, weights_only=True)  # raises on anything beyond plain data and tensors
    assert torch.equal(torch.load(os.path.join(ck, "model.pt"))["weight"], model.weight)
