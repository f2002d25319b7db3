# Issue 58: a resume's device tensors go back through hydro's pinned slots (hydro/restore.py), which
# the next save reuses. No GPU is in CI: tests/unit/stand_in_device.h's stand-in for a device, which
# a library of the build hands to this process's libhydro, takes the double tensors as a device's,
# and runs each copy only when it is waited for, its destination NaN until then: a state read
# before its copies were waited for would not be the one saved. The CUDA copies run in
# scripts/gpu-check.
import ctypes
import glob
import os

import pytest
import torch

import hydro

BUILD = os.environ.get("HYDRO_BUILD_DIR", "")  # read before the env fixture clears HYDRO_*


class StandIn:
    def __init__(self, lib):
        self._lib = lib

    def __call__(self, what):
        """The count of "pins", "queued" or "waited" since the test began."""
        return self._lib.hydro_stand_in_count(what.encode())

    def fail_wait(self, copy):
        """Copy number `copy` (of those waited for together) fails its wait, once."""
        self._lib.hydro_stand_in_fail_wait(copy)


@pytest.fixture
def device():
    """The stand-in for the Runtimes made in the test."""
    found = glob.glob(os.path.join(BUILD, "tests", "torch", "*hydro_stand_in_device*.so"))
    assert found, f"no hydro_stand_in_device library under {BUILD!r}/tests/torch: build the tests (cmake --build)"
    lib = ctypes.CDLL(found[0])
    lib.hydro_stand_in_count.argtypes = [ctypes.c_char_p]
    lib.hydro_stand_in_on()
    yield StandIn(lib)
    lib.hydro_stand_in_off()


def model_and_opt(seed, dtype):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(dtype)
    return m, torch.optim.AdamW(m.parameters(), lr=0.01)


def train(m, opt, first, last):
    for step in range(first, last):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 8, generator=g).to(next(m.parameters()).dtype)
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()


def state(m, opt):
    """Every tensor of the model's and the optimizer's state, copied."""
    tensors = list(m.state_dict().values())
    tensors += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return [t.clone() for t in tensors]


def same(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b))


def runtime(m, opt):
    rt = hydro.Runtime()
    rt.track("model", m)
    rt.track("opt", opt)
    return rt


def saved_at_3(tmp_path, dtype):
    """A model and AdamW trained 3 steps and saved at step 3; their state then."""
    m, opt = model_and_opt(0, dtype)
    train(m, opt, 0, 3)
    with runtime(m, opt) as rt:
        rt.save(3)
        rt.wait_idle()
    return m, opt, state(m, opt)


def test_a_resume_copies_each_device_tensor_through_a_pinned_slot_that_the_next_save_reuses(device, env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    m, opt, at_3 = saved_at_3(tmp_path, torch.double)
    fresh, fresh_opt = model_and_opt(1, torch.double)
    addresses = [p.data_ptr() for p in fresh.parameters()]
    with runtime(fresh, fresh_opt) as rt:
        pins, queued = device("pins"), device("queued")
        assert rt.resume() == 3
        # 4 parameters, AdamW's exp_avg and exp_avg_sq of each (its step stays a float on the host)
        assert (device("pins") - pins, device("queued") - queued) == (12, 12)
        assert device("waited") == device("queued")
        assert same(state(fresh, fresh_opt), at_3)
        assert [p.data_ptr() for p in fresh.parameters()] == addresses  # restored in place
        pins = device("pins")
        train(fresh, fresh_opt, 3, 5)
        rt.save(5)
        rt.wait_idle()
        assert device("pins") == pins  # the save copied through the resume's slots
    train(m, opt, 3, 5)
    assert same(state(fresh, fresh_opt), state(m, opt))  # as a run never interrupted
    again, again_opt = model_and_opt(2, torch.double)
    with runtime(again, again_opt) as rt:
        assert rt.resume() == 5
    assert same(state(again, again_opt), state(m, opt))


def test_a_state_the_device_does_not_take_resumes_as_torch_load_gives_it(device, env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    m, opt, at_3 = saved_at_3(tmp_path, torch.float)  # floats: host tensors to the stand-in
    fresh, fresh_opt = model_and_opt(1, torch.float)
    with runtime(fresh, fresh_opt) as rt:
        queued = device("queued")
        assert rt.resume() == 3
        assert device("queued") == queued
    assert same(state(fresh, fresh_opt), at_3)
    train(fresh, fresh_opt, 3, 4)
    train(m, opt, 3, 4)
    assert same(state(fresh, fresh_opt), state(m, opt))


def test_a_resume_whose_copy_fails_names_the_file_and_the_error(device, env, tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    saved_at_3(tmp_path, torch.double)
    fresh, fresh_opt = model_and_opt(1, torch.double)
    device.fail_wait(1)
    with runtime(fresh, fresh_opt) as rt:
        with pytest.raises(Exception, match=r"(?s)model\.pt.*illegal memory access"):
            rt.resume()


class Holder:
    """An object of the user's: its load_state_dict keeps the tensors it is given."""

    def __init__(self, **tensors):
        self.tensors = tensors

    def state_dict(self):
        return dict(self.tensors)

    def load_state_dict(self, state):
        self.tensors = dict(state)


def test_a_users_object_gets_its_own_tensor_back_and_a_sparse_state_loads_as_torch_load_gives_it(device, env,
                                                                                               tmp_path):
    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    dense = torch.arange(6, dtype=torch.double)
    sparse = torch.eye(3, dtype=torch.double).to_sparse()
    with hydro.Runtime() as rt:
        rt.track("dense", Holder(t=dense))
        rt.track("both", Holder(t=dense * 2, s=sparse))
        rt.save(1)
        rt.wait_idle()
    own = torch.zeros(6, dtype=torch.double)
    dense_holder, both_holder = Holder(t=own), Holder(t=torch.zeros(6, dtype=torch.double), s=sparse * 0)
    with hydro.Runtime() as rt:
        rt.track("dense", dense_holder)
        rt.track("both", both_holder)
        queued = device("queued")
        assert rt.resume() == 1
        assert device("queued") - queued == 1  # the dense object's; the other's file holds a sparse tensor
    assert dense_holder.tensors["t"] is own and torch.equal(own, dense)
    assert torch.equal(both_holder.tensors["t"], dense * 2)
    assert torch.equal(both_holder.tensors["s"].to_dense(), sparse.to_dense())
