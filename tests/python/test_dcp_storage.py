# Issue 34, part 3: hydro as the storage layer of a program's own torch.distributed.checkpoint calls
# (hydro.dcp): dcp.save and dcp.async_save through hydro's commit (every file hashed and fsynced, a
# manifest, one rename, `latest`, keep_last), read back by plain dcp.load without hydro, and by
# hydro.dcp.Reader, which passes over a corrupt checkpoint to the one before.
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)

import hydro.dcp
from conftest import HERE, committed, free_port, rank_env
from forkserver import spawn
from fsdp_model import digest, model as make_model
from test_fsdp import dcp_digest


def trained(steps):
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.randn(8, 32, generator=g)), torch.randn(8, 4, generator=g)).backward()
        opt.step()
    return model, opt


def state_of(model, opt):
    return {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, opt)}


def loaded(reader_or_path):
    """A fresh model and AdamW filled by dcp.load; their digest."""
    model, opt = trained(0)
    state = state_of(model, opt)
    if isinstance(reader_or_path, hydro.dcp.Reader):
        dcp.load(state, storage_reader=reader_or_path)
    else:
        dcp.load(state, checkpoint_id=reader_or_path)
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, opt, state["optimizer"])
    return digest(model, opt)


def save(root, step, steps, **kw):
    model, opt = trained(steps)
    writer = hydro.dcp.Writer(root, step, **kw)
    dcp.save(state_of(model, opt), storage_writer=writer)
    return writer.path, digest(model, opt)


def test_dcp_save_through_hydro_commits_a_checkpoint_that_plain_dcp_load_reads(tmp_path):
    path, saved = save(tmp_path, 7, 3)
    assert path == os.path.realpath(tmp_path / "latest") == str(tmp_path / "step-000000000007")
    with open(os.path.join(path, "manifest.json")) as f:
        names = {m["name"] for m in json.load(f)["files"]}
    assert names == {".metadata", "rank-0/__0_0.distcp"}, names
    assert dcp_digest(path) == saved  # a process without hydro
    assert loaded(hydro.dcp.Reader(tmp_path)) == saved


def test_a_relative_root_is_the_working_directorys_as_dcps_own_writer_takes_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, saved = save("ck", 2, 2)
    assert path == str(tmp_path / "ck" / "step-000000000002")
    reader = hydro.dcp.Reader("ck")
    assert (reader.checkpoint, loaded(reader)) == (path, saved)


def test_the_reader_passes_over_a_corrupt_checkpoint_to_the_one_before(tmp_path, capfd):
    _, first = save(tmp_path, 1, 1)
    newest, second = save(tmp_path, 2, 2)
    data = os.path.join(newest, "rank-0", "__0_0.distcp")
    with open(data, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 1]))
    reader = hydro.dcp.Reader(tmp_path)
    assert reader.step == 1 and loaded(reader) == first != second
    assert "step-000000000002" in capfd.readouterr().err


def test_the_reader_passes_over_a_checkpoint_without_dcps_metadata(tmp_path, capfd):
    _, first = save(tmp_path, 1, 1)
    staged = hydro._C.StagedCheckpoint(str(tmp_path), 2, 0)  # a hydro checkpoint DCP cannot load
    staged.add_files([], 1)
    staged.commit(False)
    reader = hydro.dcp.Reader(tmp_path)
    assert reader.step == 1 and loaded(reader) == first
    assert "has no .metadata" in capfd.readouterr().err


def test_keep_last_removes_the_older_checkpoints(tmp_path):
    for step in (1, 2, 3):
        save(tmp_path, step, step, keep_last=2)
    assert committed(tmp_path) == ["step-000000000002", "step-000000000003"]


def test_a_save_that_fails_leaves_latest_and_no_staging(tmp_path):
    save(tmp_path, 1, 1)
    model, opt = trained(2)
    state = state_of(model, opt)
    state["extra"] = lambda: None  # a value DCP must pickle into its bytes, and cannot
    writer = hydro.dcp.Writer(tmp_path, 2)
    with pytest.raises(CheckpointException, match="pickle"):
        dcp.save(state, storage_writer=writer)
    writer.reset()  # drops the staged checkpoint, which removes its directory
    assert os.path.realpath(tmp_path / "latest") == str(tmp_path / "step-000000000001")
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-000000000001"]


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        hydro.dcp.Reader(tmp_path)


# Two FSDP2 ranks (gloo) save with dcp.save and dcp.async_save through hydro; one process without
# hydro or a process group loads each checkpoint into one unsharded model: the saved bits. The ranks
# load through hydro.dcp.Reader, which passes over step 5 once one rank's file of it is torn.
def test_two_ranks_dcp_save_and_async_save_through_hydro(tmp_path):
    port = free_port()
    procs = [spawn([sys.executable, os.path.join(HERE, "dcp_save.py"), str(tmp_path / "ck")],
                   env=rank_env(r, 2, port, tmp_path / "unused"), stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True) for r in range(2)]
    digests = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, out + err
        digests.append(dict(line.split("=", 1) for line in out.splitlines() if "=" in line))
    assert digests[0] == digests[1], digests
    root = tmp_path / "ck"
    assert dcp_digest(str(root / "step-000000000003")) == digests[0]["saved3"]
    assert dcp_digest(str(root / "step-000000000005")) == digests[0]["saved5"]
    # The ranks' own Reader: each checked half and they agreed, on step 5, and on step 5 again once
    # rank 1's file of step 6 (`latest`) was torn, which rank 0 never read.
    assert digests[0]["loaded"] == f"5:{digests[0]['saved5']}", digests
    assert digests[0]["fallback"] == f"5:{digests[0]['saved5']}", digests
    assert os.path.realpath(root / "latest") == str(root / "step-000000000006")
