# The Python binding on a real device, against the interpreter's own (pip) CUDA torch: built and
# run by scripts/gpu-check where a GPU machine is lent (CI has none, and Debian's torch is
# CPU-only). Checks that
#  - a pause taken inside backward() drains the device, and with HYDRO_GPU_RELEASE=cache gives the
#    allocator's cached memory back, before it holds the thread;
#  - a CUDA run saved (sync, async, async behind: its copies staged in pinned memory), disturbed,
#    and resumed in a fresh model ends bit-for-bit where an uninterrupted run does, with dropout
#    drawing from the CUDA generator;
#  - hydro.atomic_save writes CUDA tensors that plain torch.load reads back onto the device;
#  - a CPU job on this CUDA torch pauses, resumes and saves without creating a CUDA context.
import os
import signal
import subprocess
import sys
import threading

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts: deterministic
import pytest
import torch

import hydro
from hydro import _C

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from conftest import env, hydro_env, wait_for  # noqa: E402,F401 (env: the binding's tests' fixture)

DEV = torch.device("cuda", 0)


def test_the_device_is_there():
    assert torch.cuda.is_available(), "this check needs a CUDA torch and a GPU"
    print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))


def test_a_pause_inside_backward_drains_the_device_and_releases_its_cache_before_it_holds(env):
    env.setenv("HYDRO_GPU_RELEASE", "cache")
    inside, go, after = threading.Event(), threading.Event(), []
    w = torch.randn(8192, 8192, device=DEV)

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            y = w
            for _ in range(40):  # about a second of queued device work
                y = y @ w
            inside.set()
            go.wait()
            out = g.mul(2)  # the next operator: drains, then holds
            after.append(True)
            return out

    x = torch.ones(3, device=DEV, requires_grad=True)
    torch.cuda.synchronize()
    with hydro.Runtime():
        assert _C.drains_cuda_on_pause()
        t = threading.Thread(target=lambda: Probe.apply(x).sum().backward())
        t.start()
        inside.wait()
        torch.empty(2 << 30, dtype=torch.uint8, device=DEV)  # freed at once: a 2 GiB segment cached
        busy_before = not torch.cuda.default_stream(DEV).query()
        cached_before = torch.cuda.memory_reserved(DEV)
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_for(lambda: _C.pause_state()["armed"])
        go.set()
        wait_for(lambda: _C.pause_state()["threads_waiting"] == 1)
        idle_while_paused = torch.cuda.default_stream(DEV).query()  # no ATen operator: not held
        cached_while_paused = torch.cuda.memory_reserved(DEV)
        assert after == [] and t.is_alive()
        os.kill(os.getpid(), signal.SIGUSR2)
        wait_for(lambda: not _C.pause_state()["pending"])
        t.join(60)
    assert after == [True]
    assert busy_before, "the probe queued too little work to see a drain"
    assert idle_while_paused, "the device still had work while the thread was held"
    assert cached_while_paused <= cached_before - (2 << 30), (cached_before, cached_while_paused)
    assert torch.equal(x.grad, torch.full((3,), 2.0, device=DEV))


def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.BatchNorm1d(512), torch.nn.ReLU(),
                            torch.nn.Dropout(0.3), torch.nn.Linear(512, 10)).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
    return m, opt, sched


def train(m, opt, sched, steps):
    for _ in range(steps):
        x = torch.randn(64, 256, device=DEV)  # the CUDA generator: its state is in the checkpoint
        y = torch.randint(0, 10, (64,), device=DEV)
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def digest(m, opt):
    return [t.detach().cpu().clone() for t in m.state_dict().values()] + \
           [v.detach().cpu().clone() for s in opt.state_dict()["state"].values() for v in s.values()]


@pytest.mark.parametrize("mode", ["sync_any", "async", "behind"])
def test_a_cuda_run_resumed_from_its_checkpoint_is_bit_identical(env, tmp_path, mode):
    """Its device tensors' copies staged in pinned memory on hydro's stream (issue 58), in each mode;
    behind: async, the copies running behind the next steps' forward and backward."""
    torch.use_deterministic_algorithms(True)
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_CKPT_MODE", "async" if mode == "behind" else mode)
    env.setenv("HYDRO_ASYNC_COPY", "behind" if mode == "behind" else "save")
    torch.cuda.manual_seed(5)
    m, opt, sched = make()
    train(m, opt, sched, 10)
    want = digest(m, opt)

    torch.cuda.manual_seed(5)
    m, opt, sched = make()
    with hydro.Runtime() as rt:
        for name, obj in [("model", m), ("optimizer", opt), ("scheduler", sched)]:
            rt.track(name, obj)
        train(m, opt, sched, 4)
        rt.save(4)
        train(m, opt, sched, 3)  # changes the device tensors while an async write may run
        rt.wait_idle()

    torch.manual_seed(99)
    torch.cuda.manual_seed(99)
    m, opt, sched = make()
    train(m, opt, sched, 1)  # other weights and generator states, to be replaced
    with hydro.Runtime() as rt:
        for name, obj in [("model", m), ("optimizer", opt), ("scheduler", sched)]:
            rt.track(name, obj)
        assert rt.resume() == 4
    assert all(p.device == DEV for p in m.parameters())
    assert all(v.device == DEV for s in opt.state.values() for v in s.values() if v.dim())
    train(m, opt, sched, 6)
    got = digest(m, opt)
    assert len(got) == len(want)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_atomic_save_of_cuda_tensors_loads_back_onto_the_device(tmp_path):
    state = {"w": torch.randn(1000, 1000, device=DEV), "step": 7}
    path = tmp_path / "state.pt"
    hydro.atomic_save(state, str(path))
    back = torch.load(str(path))
    assert back["step"] == 7 and back["w"].device == DEV
    assert torch.equal(back["w"], state["w"])


CPU_JOB = """
import os, signal, sys, threading, time
import torch, hydro
from hydro import _C

def wait_for(what):
    deadline = time.monotonic() + 60
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)

m, stop = torch.nn.Linear(64, 64), threading.Event()
def train():
    while not stop.is_set():
        m(torch.randn(8, 64)).sum().backward()

with hydro.Runtime() as rt:
    rt.track("model", m)
    assert _C.drains_cuda_on_pause()  # a CUDA torch that sees a device
    t = threading.Thread(target=train)
    t.start()
    for _ in range(3):
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_for(lambda: _C.pause_state()["threads_waiting"] == 1)
        os.kill(os.getpid(), signal.SIGUSR2)
        wait_for(lambda: _C.pause_state()["threads_waiting"] == 0)
    stop.set()
    t.join()
    rt.save(1)
    rt.wait_idle()
print([torch._C._cuda_hasPrimaryContext(i) for i in range(torch.cuda.device_count())])
"""


def test_a_cpu_job_on_a_cuda_torch_pauses_and_saves_without_creating_a_cuda_context(tmp_path):
    out = subprocess.run([sys.executable, "-c", CPU_JOB], env=hydro_env({"HYDRO_CKPT_DIR": str(tmp_path)}),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "nothing to drain" in out.stderr
    assert "True" not in out.stdout, "a device got a context: " + out.stdout
