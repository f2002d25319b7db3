# hydro.Runtime from Python: the C++ checkpoint protocol, with Python objects' state_dict()s.
import io
import json
import os
import random
import signal
import subprocess

import numpy as np
import pytest
import torch

import hydro
from conftest import committed, hydro_env


def model_and_opt():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return m, opt, sched


def train(m, opt, sched, steps):
    for _ in range(steps):
        loss = m(torch.randn(16, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def runtime(m, opt, sched):
    rt = hydro.Runtime()
    rt.track("model", m)
    rt.track("optimizer", opt)
    rt.track("scheduler", sched)
    return rt


def test_saves_plain_torch_files_and_resumes_every_generator(env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    m, opt, sched = model_and_opt()
    with runtime(m, opt, sched) as rt:
        assert rt.resume() == 0
        train(m, opt, sched, 3)
        path = rt.save(3)
        expect = (torch.rand(2), random.random(), np.random.rand())
        rt.wait_idle()
    assert os.path.basename(path) == "step-000000000003"
    assert os.path.realpath(tmp_path / "latest") == path
    files = sorted(os.listdir(path))
    assert files == ["manifest.json", "model.pt", "optimizer.pt", "python-rng.pt", "rng.pt", "scheduler.pt"]
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    assert {f["name"] for f in manifest["files"]} == set(files) - {"manifest.json"}
    saved = torch.load(os.path.join(path, "model.pt"))  # plain torch.load
    assert torch.equal(saved["0.weight"], m[0].weight)
    assert torch.load(os.path.join(path, "scheduler.pt"))["last_epoch"] == 3

    m2, opt2, sched2 = model_and_opt()
    torch.manual_seed(99); random.seed(99); np.random.seed(99)
    with runtime(m2, opt2, sched2) as rt:
        assert rt.resume() == 3
        assert (torch.rand(2).tolist(), random.random(), np.random.rand()) == (expect[0].tolist(), *expect[1:])
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    assert sched2.last_epoch == 3 and opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_keep_last_and_force_save(env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_KEEP_LAST", "2")
    m, opt, sched = model_and_opt()
    with runtime(m, opt, sched) as rt:
        rt.save(1, keep_always=True)
        for step in (2, 3, 4):
            rt.save(step)
        rt.wait_idle()
    assert committed(tmp_path) == ["step-000000000001", "step-000000000003", "step-000000000004"]


def test_a_corrupt_checkpoint_falls_back_to_the_previous_one(env, tmp_path, capfd):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    m, opt, sched = model_and_opt()
    with runtime(m, opt, sched) as rt:
        rt.save(1)
        rt.save(2)
        rt.wait_idle()
    with open(tmp_path / "step-000000000002" / "optimizer.pt", "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    with runtime(*model_and_opt()) as rt:
        assert rt.resume() == 1
    assert "optimizer.pt" in capfd.readouterr().err


def test_step_end_checkpoints_every_n_steps(env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_CKPT_EVERY", "2")
    with runtime(*model_and_opt()) as rt:
        for step in range(1, 6):
            assert rt.step_end(step)
        rt.wait_idle()
    assert os.readlink(tmp_path / "latest") == "step-000000000004"


def test_a_failing_state_dict_is_an_error_and_commits_nothing(env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))

    class Broken:
        def state_dict(self):
            raise ValueError("cannot export")

        def load_state_dict(self, s):
            pass

    with hydro.Runtime() as rt:
        rt.track("broken", Broken())
        with pytest.raises(RuntimeError, match="cannot export"):
            rt.save(1)
    assert not os.path.exists(tmp_path / "latest")
    assert committed(tmp_path) == []


def test_loading_into_a_different_model_names_the_file(env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    with runtime(*model_and_opt()) as rt:
        rt.save(1)
    with hydro.Runtime() as rt:
        rt.track("model", torch.nn.Linear(3, 3))
        with pytest.raises(RuntimeError, match="step-000000000001: model.pt: RuntimeError: Error.s. in loading state_dict for Linear"):
            rt.resume()


def test_on_resume_hands_over_the_verified_file_and_loads_nothing(env, tmp_path):
    # A framework that loads its own files (hydro.transformers): `obj` needs state_dict() only.
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))

    class SaveOnly:
        def state_dict(self):
            return {"w": torch.arange(3)}

    with hydro.Runtime() as rt:
        rt.track("parts", SaveOnly(), on_resume=lambda path: pytest.fail("called on a fresh start"))
        assert rt.resume() == 0
        rt.save(7)
    handed = []
    with hydro.Runtime() as rt:
        rt.track("parts", SaveOnly(), on_resume=handed.append)
        assert rt.resume() == 7
    assert handed == [str(tmp_path / "step-000000000007" / "parts.pt")]
    assert torch.equal(torch.load(handed[0])["w"], torch.arange(3))
    with hydro.Runtime() as rt, pytest.raises(RuntimeError, match="step-000000000007/absent.pt is missing"):
        rt.track("absent", SaveOnly(), on_resume=handed.append)  # not in that checkpoint: never a silent skip
        rt.resume()
    with hydro.Runtime() as rt, pytest.raises(TypeError, match="has no state_dict"):
        rt.track("none", object(), on_resume=handed.append)


def test_bad_input_is_named(env, tmp_path):
    with hydro.Runtime() as rt:
        with pytest.raises(TypeError, match="track\\('x'\\): a int has no state_dict"):
            rt.track("x", 3)
        with pytest.raises(RuntimeError, match="bad name 'a/b'"):
            rt.track("a/b", torch.nn.Linear(1, 1))
        with pytest.raises(RuntimeError, match="HYDRO_CKPT_DIR is not set"):
            rt.save(1)
    env.setenv("HYDRO_CKPT_MODE", "fast")
    with pytest.raises(RuntimeError, match="HYDRO_CKPT_MODE"):
        hydro.Runtime()
    env.setenv("HYDRO_CKPT_MODE", "sync_any")
    env.setenv("HYDRO_CKPT_DIR", "relative/dir")
    with pytest.raises(RuntimeError, match="HYDRO_CKPT_DIR"):
        hydro.Runtime()


def torch_save_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class Tied(torch.nn.Module):
    """The model, and a layer sharing its first weight: one storage in the file, as torch.save keeps."""

    def __init__(self, seq):
        super().__init__()
        self.seq, self.tied = seq, torch.nn.Linear(4, 8)
        self.tied.weight = seq[0].weight

    def forward(self, x):
        return self.seq(x)


def tied(m, opt, sched):
    return Tied(m), opt, sched


def test_async_checkpoints_hold_the_state_at_save_and_are_what_torch_save_writes(env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_CKPT_MODE", "async")
    m, opt, sched = tied(*model_and_opt())
    train(m, opt, sched, 2)
    want = {"model": torch_save_bytes(m.state_dict()), "optimizer": torch_save_bytes(opt.state_dict()),
            "scheduler": torch_save_bytes(sched.state_dict()),
            "python-rng": torch_save_bytes(hydro.runtime._PythonRNG().state_dict())}  # pickled without torch's pickler
    with runtime(m, opt, sched) as rt:
        path = rt.save(2)
        train(m, opt, sched, 3)  # goes on while the background thread writes step 2's copies
        rt.wait_idle()
        for name, data in want.items():
            with open(os.path.join(path, name + ".pt"), "rb") as f:
                assert f.read() == data, name
        rt.save(5)
        rt.wait_idle()
    m2, opt2, sched2 = tied(*model_and_opt())
    with runtime(m2, opt2, sched2) as rt:
        assert rt.resume() == 5
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)


def test_a_full_disk_under_an_async_write_is_an_error_not_a_crash(env, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)], check=True)  # root, as CI
    try:
        env.setenv("HYDRO_CKPT_DIR", str(mnt))
        env.setenv("HYDRO_CKPT_MODE", "async")
        big = torch.nn.Linear(1024, 1024)  # 4 MiB
        with hydro.Runtime() as rt:
            rt.track("model", big)
            rt.save(1)
            with pytest.raises(RuntimeError, match="No space left on device"):
                rt.wait_idle()
        assert not os.path.exists(mnt / "latest")
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_forked_child_ignores_the_parents_signals_and_can_start_its_own_runtime(env):
    with hydro.Runtime():
        pid = os.fork()
        if pid == 0:  # the child: the parent's handlers ignore signals here; its own Runtime works
            code = 1
            try:
                # raise_signal: the handler has run when it returns (a kill() to the process
                # may be taken by another of its threads a moment later)
                signal.raise_signal(signal.SIGUSR1)  # inherited handler: ignored, nothing pending
                if not hydro._C.pause_state()["pending"]:
                    with hydro.Runtime():
                        signal.raise_signal(signal.SIGUSR1)
                        pending = hydro._C.pause_state()["pending"]
                        signal.raise_signal(signal.SIGUSR2)
                    code = 0 if pending else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


SAVE_OR_RESUME = """
import sys, torch, hydro
m = torch.nn.Linear(4, 4)
with hydro.Runtime() as rt:
    rt.track("model", m)
    rt.save(5) if sys.argv[1] == "save" else print(rt.resume())
"""


def torch_loads_openblas(python):
    """Whether torch's BLAS is OpenBLAS (libopenblas.so.0), not counting numpy's own renamed copy
    (libscipy_openblas64_*, which pip's numpy loads beside a torch on MKL)."""
    code = ("import os, torch; torch.ones(8, 8) @ torch.ones(8, 8); "
            "print(any(os.path.basename(l.split()[-1]).startswith('libopenblas') for l in open('/proc/self/maps')))")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "True"


def test_a_resume_with_another_openblas_thread_count_says_so(python, tmp_path):
    """BLAS splits sums by thread count, and torch.set_num_threads leaves OpenBLAS's pool alone: a
    resume with another OPENBLAS_NUM_THREADS than the checkpoint's names it, and the count to set."""
    def run(what, blas):
        extra = {"HYDRO_CKPT_DIR": str(tmp_path), "OPENBLAS_NUM_THREADS": blas}
        out = subprocess.run([python, "-c", SAVE_OR_RESUME, what], env=hydro_env(extra), capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stderr
    run("save", "2")
    manifest = json.loads((tmp_path / "latest" / "manifest.json").read_text())
    if not torch_loads_openblas(python):  # pip's torch: MKL, which torch.set_num_threads does set
        assert not torch.__version__.startswith("1.13"), "Debian's torch uses OpenBLAS (libopenblas0-pthread)"
        assert "blas_threads" not in manifest and "OpenBLAS" not in run("resume", "1")
        return
    assert manifest["blas_threads"] == 2
    assert "other thread counts" not in run("resume", "2")
    err = run("resume", "1")
    assert "OpenBLAS's threads 2 then, 1 now" in err and "OPENBLAS_NUM_THREADS=2" in err, err


class Mixed:
    """A state the async copy takes every way: a tensor of several copy chunks (shared by the helper
    thread), a strided view and a lazily conjugated tensor (copied at once), and plain values whose
    pickle a cached one must not stand for (0.0 and -0.0, 1 and True, a new key)."""

    def __init__(self):
        self.big = torch.randn(3 << 18)  # 3 MiB
        self.grid = torch.randn(64, 32)
        self.z = torch.randn(16, dtype=torch.complex64)
        self.plain = {"lr": 0.0, "flag": 1}

    def state_dict(self):
        return {"big": self.big, "t": self.grid.t(), "conj": self.z.conj(), **self.plain}

    def load_state_dict(self, state):
        raise AssertionError("not resumed here")


def test_async_copies_and_cached_pickles_are_the_state_at_each_save(env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_CKPT_MODE", "async")
    obj = Mixed()
    plains = [{"lr": 0.0, "flag": 1}, {"lr": 0.0, "flag": 1}, {"lr": -0.0, "flag": 1}, {"lr": -0.0, "flag": True},
              {"lr": -0.0, "flag": 1.0}, {"lr": -0.0, "flag": 1.0, "new": None}]
    with hydro.Runtime() as rt:
        rt.track("mixed", obj)
        for step, plain in enumerate(plains, 1):
            obj.plain = dict(plain)
            want = {k: v.clone() if torch.is_tensor(v) else v for k, v in obj.state_dict().items()}
            path = rt.save(step)
            for t in (obj.big, obj.grid, obj.z):
                t.add_(1)  # training goes on at once
            rt.wait_idle()
            got = torch.load(os.path.join(path, "mixed.pt"))
            assert list(got) == list(want), step
            for k, v in want.items():
                if torch.is_tensor(v):
                    assert torch.equal(got[k], v.resolve_conj()), (step, k)
                else:  # the type and the sign of zero too
                    assert (type(got[k]), repr(got[k])) == (type(v), repr(v)), (step, k)


def test_gpu_release_is_checked_and_without_a_device_says_it_has_no_effect(env, capfd):
    # HYDRO_GPU_RELEASE (issue 33) through the binding: a bad value and the variable it replaced are
    # errors naming the setting; on a machine with no CUDA device (CI) full is accepted, logged as
    # without effect, and the Runtime works.
    env.setenv("HYDRO_GPU_RELEASE", "on")
    with pytest.raises(RuntimeError, match="HYDRO_GPU_RELEASE='on' is not off, cache or full"):
        hydro.Runtime()
    env.delenv("HYDRO_GPU_RELEASE")
    env.setenv("HYDRO_CUDA_RELEASE", "on")
    with pytest.raises(RuntimeError, match="HYDRO_CUDA_RELEASE='on' is no longer read: set HYDRO_GPU_RELEASE=cache"):
        hydro.Runtime()
    env.delenv("HYDRO_CUDA_RELEASE")
    env.setenv("HYDRO_GPU_RELEASE", "full")
    assert not torch.cuda.is_available(), "this test is for a machine without a GPU (tests/gpu has the GPU's)"
    with hydro.Runtime() as rt:
        assert rt.step_end(1)
    err = capfd.readouterr().err
    cpu_only = not torch.backends.cuda.is_built()
    reason = "hydro was built against a libtorch without CUDA" if cpu_only else "no CUDA device is visible"
    assert f"warning: HYDRO_GPU_RELEASE=full has no effect: {reason}" in err, err
