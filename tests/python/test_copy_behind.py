# HYDRO_ASYNC_COPY=behind: an async save returns once the state is captured, its copies running on
# behind the next forward and backward; the next optimizer step (any optimizer's) waits for them,
# and a module's buffers, which a forward changes, are copied at once. The checkpoint holds the
# state at save(), byte for byte what torch.save wrote then.
import io
import os

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


def test_a_save_whose_copies_run_behind_holds_the_state_at_save(env, tmp_path, capfd):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_CKPT_MODE", "async")
    env.setenv("HYDRO_ASYNC_COPY", "behind")
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


def test_without_a_tracked_optimizer_the_copies_are_made_at_save(env, tmp_path):
    # Nothing would wait for the copies before the tensors change: behind is not taken.
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    env.setenv("HYDRO_CKPT_MODE", "async")
    env.setenv("HYDRO_ASYNC_COPY", "behind")
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
