# Issue 34, part 3: a rank's file of sharded state in DCP's data layout (hydro.shard_file), and the
# .metadata the committing rank merges from the ranks' indexes, which torch.distributed.checkpoint
# loads; files of hydro's first sharded format still resume. One process, no process group: DCP's
# planners cut and fill plain tensors as they do a rank's shards (test_fsdp runs FSDP2 on 2 ranks).
import os
import struct

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)

from conftest import HERE
from hydro import reshard, shard_file

FIRST_FORMAT = os.path.join(HERE, "data", "first_format")  # written by hydro's reshard.py of ef011fd


def trained(seed):
    """A model and its AdamW after one step, as data/first_format's were made."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    return model, opt


def save(directory, name, state):
    with open(os.path.join(directory, f"{name}.pt"), "wb") as f:
        shard_file.write(reshard.to_chunks(name, "helpers", state), f)


def fill_from(path, name, state):
    with reshard._Part(str(path), name) as part:
        reshard.fill(name, state, [part])
    return state


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_a_file_resumes_its_bits_and_each_chunk_loads_alone(tmp_path):
    model, _ = trained(1)
    save(tmp_path, "model", get_model_state_dict(model))
    other, _ = trained(2)
    set_model_state_dict(other, fill_from(tmp_path / "model.pt", "model", get_model_state_dict(other)))
    assert_same(other.state_dict(), model.state_dict())
    with open(tmp_path / "model.pt", "rb") as f:
        index = shard_file.read_index(f, "model.pt")
        offsets, sizes, span = index["tensors"]["model.0.weight"]["chunks"][0]
        weight = model[0].weight.detach()
        assert torch.equal(shard_file.read_tensor(f, span, "model.pt"), weight)
        # A whole chunk goes straight into a contiguous tensor of its dtype, and into no other.
        into = torch.empty_like(weight)
        assert shard_file.read_into(f, span, into) and torch.equal(into, weight)
        assert not shard_file.read_into(f, span, torch.empty(weight.shape[::-1]).t())


def test_a_bfloat16_chunk_is_read_into_its_tensor_whole(tmp_path):
    state = {"w": torch.randn(5, 7).to(torch.bfloat16), "step": torch.tensor(3.0)}
    save(tmp_path, "extra", state)
    filled = fill_from(tmp_path / "extra.pt", "extra", {k: torch.zeros_like(v) for k, v in state.items()})
    assert_same(filled, state)


def test_dcp_loads_the_files_through_the_merged_metadata(tmp_path):
    model, opt = trained(1)
    save(tmp_path, "model", get_model_state_dict(model))
    save(tmp_path, "optimizer", get_optimizer_state_dict(model, opt))
    with open(tmp_path / ".metadata", "wb") as f:
        f.write(reshard.dcp_metadata(str(tmp_path), ["model.pt", "optimizer.pt"], ["model", "optimizer"]))
    other, other_opt = trained(2)
    state = {"model": get_model_state_dict(other), "optimizer": get_optimizer_state_dict(other, other_opt)}
    dcp.load(state, checkpoint_id=str(tmp_path))
    set_model_state_dict(other, state["model"])
    set_optimizer_state_dict(other, other_opt, state["optimizer"])
    assert_same(other.state_dict(), model.state_dict())
    for p, q in zip(model.parameters(), other.parameters()):
        assert_same(other_opt.state[q], opt.state[p])


def test_files_of_hydros_first_format_still_resume():
    expected = torch.load(os.path.join(FIRST_FORMAT, "expected.pt"), weights_only=True)
    model, opt = trained(2)
    set_model_state_dict(model, fill_from(os.path.join(FIRST_FORMAT, "model.pt"), "model", get_model_state_dict(model)))
    optim = fill_from(os.path.join(FIRST_FORMAT, "optimizer.pt"), "optimizer", get_optimizer_state_dict(model, opt))
    set_optimizer_state_dict(model, opt, optim)
    assert_same(model.state_dict(), expected["model"])
    for i, p in enumerate(model.parameters()):
        assert_same(opt.state[p], expected["optimizer"]["state"][i])


def test_an_optimizer_option_only_one_torch_has_is_no_error(tmp_path, capfd):
    # A checkpoint resumed under another torch, as torch's own load_state_dict does: an option
    # (param_groups' hyperparameter) this torch's optimizer adds keeps its value, one it lacks is
    # passed over; the log names both.
    model, opt = trained(1)
    opt.param_groups[0]["hydro_test_older"] = True
    save(tmp_path, "optimizer", get_optimizer_state_dict(model, opt))
    other, other_opt = trained(2)
    other_opt.param_groups[0]["hydro_test_newer"] = 0.5
    optim = fill_from(tmp_path / "optimizer.pt", "optimizer", get_optimizer_state_dict(other, other_opt))
    set_optimizer_state_dict(other, other_opt, optim)
    assert other_opt.param_groups[0]["hydro_test_newer"] == 0.5
    assert "hydro_test_older" not in other_opt.param_groups[0]
    for p, q in zip(model.parameters(), other.parameters()):
        assert_same(other_opt.state[q], opt.state[p])
    err = capfd.readouterr().err
    assert "hydro_test_older': True}, which the checkpoint has (a newer torch's): passed over" in err, err
    assert "hydro_test_newer" in err and "this optimizer's own values stay" in err, err
    # A tensor only one side has is still an error: that is state, not an option.
    other_opt.state[next(iter(other.parameters()))]["hydro_test_tensor"] = torch.zeros(1)
    with pytest.raises(ValueError, match="here only .*hydro_test_tensor"):
        fill_from(tmp_path / "optimizer.pt", "optimizer", get_optimizer_state_dict(other, other_opt))


@pytest.mark.parametrize("damage", ["index outside", "not ours"])
def test_a_damaged_file_is_an_error_naming_it(tmp_path, damage):
    model, _ = trained(1)
    save(tmp_path, "model", get_model_state_dict(model))
    path = tmp_path / "model.pt"
    data = bytearray(path.read_bytes())
    if damage == "index outside":  # the trailer's index offset moved one byte on
        start, length, magic = struct.unpack("<QQ8s", data[-24:])
        data[-24:] = struct.pack("<QQ8s", start + 1, length, magic)
        expected = "lies outside it"
    else:
        data = data[:-1]  # no trailer: taken for the first format, which it is not either
        expected = "not a rank's sharded state"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=expected) as e:
        fill_from(path, "model", get_model_state_dict(model))
    assert str(path) in str(e.value)


def chunks_equal(a, b):
    """Two to_chunks results cut alike, with equal values."""
    assert (a["kind"], a["tensors"], a["values"], a["mappings"]) == (b["kind"], b["tensors"], b["values"], b["mappings"])
    assert len(a["data"]) == len(b["data"])
    for x, y in zip(a["data"], b["data"]):
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


# An async save's stall is mostly DCP's planning: to_chunks plans again only when the layout changed.
def test_a_cached_plan_cuts_as_a_new_one_and_a_new_layout_is_planned_anew():
    model, opt = trained(1)
    cache = {}
    reshard.to_chunks("optimizer", "helpers", get_optimizer_state_dict(model, opt), cache)
    plan = cache["plan"]
    opt.param_groups[0]["lr"] = 0.5  # a plain value changes: its bytes, not the plan
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    state = get_optimizer_state_dict(model, opt)
    chunks_equal(reshard.to_chunks("optimizer", "helpers", state, cache), reshard.to_chunks("optimizer", "helpers", state))
    assert cache["plan"] is plan
    wider = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    state = get_model_state_dict(wider)
    chunks_equal(reshard.to_chunks("optimizer", "helpers", state, cache), reshard.to_chunks("optimizer", "helpers", state))
    assert cache["plan"] is not plan


# The plain values' pickles are cached by repr: values equal in Python but pickled otherwise
# (0.0 and -0.0, 0 and False, a tuple and a list) each get their own bytes.
def test_cached_pickles_tell_equal_values_of_other_types_apart():
    model, opt = trained(1)
    cache = {}
    for value in (0.0, -0.0, 0, False, None, (0.0,), [0.0], 0.0):
        opt.param_groups[0]["weight_decay"] = value
        state = get_optimizer_state_dict(model, opt)
        chunks_equal(reshard.to_chunks("optimizer", "helpers", state, cache), reshard.to_chunks("optimizer", "helpers", state))
    assert cache["pickled"], "the plain values were not cached"
