# HYDRO_ASYNC_COPY=behind: an async save returns once the state is captured, its copies running on
# behind the next forward and backward; the next optimizer step (any optimizer's) waits for them,
# and a module's buffers, which a forward changes, are copied at once. The checkpoint holds the
# state at save(), byte for byte what torch.save wrote then.
import io
import os
import signal
import sys
import time
import traceback

import pytest
import torch
import torch.optim.optimizer as optimizers

import hydro

HOOKS = getattr(optimizers, "register_optimizer_step_pre_hook", None)  # torch 2.0 and later


class Counted(torch.nn.Module):
    """A buffer of 64 MiB, whose last values every forward changes first."""

    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(1 << 24))

    def forward(self, x):
        self.seen[-16:].add_(1)
        return x


class TailFirst(torch.optim.SGD):
    """SGD that first changes the last values of every parameter: a copy of 64 MiB still running
    when the step starts would miss them."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.view(-1)[-16:].mul_(0.5)
        return super().step(closure)


def model_and_opt():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), Counted(), torch.nn.Linear(4096, 4))  # 64 MiB of weights
    return m, TailFirst(m.parameters(), lr=0.01, momentum=0.9)


def step(m, opt):
    loss = m(torch.randn(2, 4096)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def saved_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj.state_dict(), buf)
    return buf.getvalue()


def fences():
    return dict(getattr(optimizers, "_global_optimizer_pre_hooks", {}))


@pytest.fixture
def behind(env, tmp_path):
    """Async mode, copies behind, checkpoints in tmp_path."""
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_CKPT_MODE", "async")
    env.setenv("HYDRO_ASYNC_COPY", "behind")


def test_a_save_whose_copies_run_behind_holds_the_state_at_save(behind, capfd):
    m, opt = model_and_opt()
    before = fences()
    with hydro.Runtime() as rt:
        rt.track("model", m)
        rt.track("optimizer", opt)
        assert (len(fences()) == len(before) + 1) == (HOOKS is not None)
        for n in range(1, 4):
            step(m, opt)
            want = {"model": saved_bytes(m), "optimizer": saved_bytes(opt)}
            path = rt.save(n)
            if n % 2:
                opt.step()  # at once (the gradients are still there): it changes every weight's tail first
            step(m, opt)  # at once on even steps: the forward changes the buffer's tail first
            rt.wait_idle()
            for name, data in want.items():
                with open(os.path.join(path, name + ".pt"), "rb") as f:
                    assert f.read() == data, (n, name)
    assert fences() == before, "close() removes the optimizer hook"
    if HOOKS is None:  # Debian's torch 1.13: each save copies before it returns, and says so
        assert "HYDRO_ASYNC_COPY=behind needs the optimizer step hooks of torch 2.0" in capfd.readouterr().err


def step_in_a_child(m, opt):
    """A forward and an optimizer step in a forked child: 0, or 1 with the error on stderr. The
    gradients are set, not computed: autograd refuses a child forked after the parent's backward on
    some builds (Debian's torch 2.6: "Unable to handle autograd's threading in combination with
    fork-based multiprocessing"), as torch's notes on autograd and fork say it may."""
    try:
        torch.set_num_threads(1)  # as a DataLoader worker does: torch's OpenMP pool is not the child's
        with torch.no_grad():
            m(torch.randn(2, 4096))
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        return 0
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
        sys.stderr.flush()
        return 1


def test_a_child_forked_while_the_copies_run_steps_without_waiting_for_them(behind):
    # The child has the save's pending copies but not the helper thread that makes them: its
    # optimizer step would wait forever. It goes on (it never writes the checkpoint), and the parent's
    # checkpoint still holds the state at save.
    m, opt = model_and_opt()
    with hydro.Runtime() as rt:
        rt.track("model", m)
        rt.track("optimizer", opt)
        step(m, opt)
        want = saved_bytes(m)
        path = rt.save(1)
        pid = os.fork()  # at once: 128 MiB are still being copied
        if pid == 0:
            os._exit(step_in_a_child(m, opt))
        for _ in range(600):  # a bound for a hang, not a measure: the step takes milliseconds
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's optimizer step waited for copies its process never makes")
        assert os.waitstatus_to_exitcode(status) == 0
        rt.wait_idle()
        with open(os.path.join(path, "model.pt"), "rb") as f:
            assert f.read() == want


def test_without_a_tracked_optimizer_the_copies_are_made_at_save(behind):
    # Nothing would wait for the copies before the tensors change: behind is not taken.
    m, _ = model_and_opt()
    with hydro.Runtime() as rt:
        rt.track("model", m)
        want = saved_bytes(m)
        path = rt.save(1)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(1)  # at once, by hand, with no optimizer
        rt.wait_idle()
        with open(os.path.join(path, "model.pt"), "rb") as f:
            assert f.read() == want


def test_a_bad_value_names_the_setting(env):
    env.setenv("HYDRO_ASYNC_COPY", "later")
    with pytest.raises(RuntimeError, match="HYDRO_ASYNC_COPY='later' is not save or behind"):
        hydro.Runtime()
