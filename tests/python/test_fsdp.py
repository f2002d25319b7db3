# Issue 34, part 1: a model sharded with FSDP2 (fully_shard; CPU and gloo here, the same calls on
# CUDA and NCCL) and its AdamW, tracked by hydro (fsdp_train.py, ranks started as torchrun would):
#  - every rank writes its own shards through the ranks' commit (sync_any, the default), nothing
#    gathered, and a requeue resumes them bit-for-bit;
#  - async mode: with several ranks every rank writes its own shards on its background thread and
#    the ranks commit them together; one rank's are checkpointed without serializing on the
#    training thread;
#  - part 2: a checkpoint of 2 ranks' shards resumes on 1 rank, one of 4 ranks on 2 and on 3, and one
#    of 1 rank on 2 (hydro.reshard);
#  - part 3: torch.distributed.checkpoint loads hydro's checkpoint of either without hydro;
#  - part 4: a rank killed inside a sharded save (sync_any and async) leaves the previous checkpoint.
# The ranks' store authenticates with MUNGE: ctest starts munged first (FIXTURES_REQUIRED munge).
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest
import torch

import hydro
from conftest import HERE, free_port, rank_env
from forkserver import spawn

WORKER = os.path.join(HERE, "fsdp_train.py")
DCP_LOAD = os.path.join(HERE, "dcp_load.py")
STEPS, STOP_AT = 40, 5
LONG = 100000  # the stopped runs' steps: SIGTERM always lands before their end


def run(ranks, ck, extra=None, stop_at=None):
    """Runs fsdp_train.py on `ranks` ranks to its end, or, with stop_at, sends every rank SIGTERM
    (as Slurm does) once each has printed that step. Returns each rank's (exit status, digest, stderr)."""
    port = free_port()
    procs = []
    for r in range(ranks):
        env = rank_env(r, ranks, port, ck, extra)
        steps = STEPS if stop_at is None else LONG
        procs.append(spawn([sys.executable, WORKER, str(steps)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True))
    if stop_at is not None:
        for p in procs:
            for line in p.stdout:
                if line.strip() == f"step {stop_at}":
                    break
        for p in procs:
            p.send_signal(signal.SIGTERM)
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        print(f"--- a rank: status {p.returncode}\n{stdout}{stderr}")  # whole in a failure's report
        digests = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
        out.append((p.returncode, digests.get("digest"), stderr, digests))
    return out


def stopped_for_requeue(ranks, ck, extra=None):
    """run() with SIGTERM at step STOP_AT: every rank checkpointed and exited for a requeue."""
    stopped = run(ranks, ck, extra, stop_at=STOP_AT)
    assert [s for s, _, _, _ in stopped] == [hydro.EXIT_REQUEUE] * ranks, [err for _, _, err, _ in stopped]
    return stopped


def digest_of(results):
    assert all(status == 0 for status, _, _, _ in results), [err for _, _, err, _ in results]
    digests = {d for _, d, _, _ in results}
    assert len(digests) == 1 and None not in digests, digests
    return digests.pop()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return digest_of(run(2, tmp_path_factory.mktemp("uninterrupted")))


@pytest.fixture(scope="module")
def two_ranks_stopped(tmp_path_factory):
    """A checkpoint of 2 ranks' shards (SIGTERM at step STOP_AT) and each rank's run() result, made
    once for the tests below: each reads it, or resumes a copy of it (a resume commits its own)."""
    ck = tmp_path_factory.mktemp("two") / "ck"
    return ck, stopped_for_requeue(2, ck)


def copy_of(checkpoint, tmp_path):
    mine = tmp_path / "ck"
    shutil.copytree(checkpoint, mine, symlinks=True)
    return mine


def only_shards(path, ranks):
    """The file holds this rank's chunks alone (hydro.shard_file), each loading with weights_only=True:
    each tensor's chunk is 1/ranks of its global rows; no rank wrote a whole one."""
    with open(path, "rb") as f:
        index = hydro.shard_file.read_index(f, path)
        tensors = {fqn: whole for fqn, whole in index["tensors"].items() if len(whole["size"]) > 0}
        assert tensors, path
        for fqn, whole in tensors.items():
            assert len(whole["chunks"]) == 1, (path, fqn, whole)
            offsets, sizes, span = whole["chunks"][0]
            assert sizes[0] * ranks == whole["size"][0], (path, fqn, whole)
            data = hydro.shard_file.read_tensor(f, span, path)
            assert type(data) is torch.Tensor and tuple(data.shape) == sizes, (path, fqn, data.shape)


def dcp_digest(step_dir):
    """The digest of the checkpoint as torch.distributed.checkpoint alone loads it (dcp_load.py)."""
    p = subprocess.run([sys.executable, DCP_LOAD, step_dir], capture_output=True, text=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if not k.startswith("HYDRO_")})
    assert p.returncode == 0, p.stdout + p.stderr
    return dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)["digest"]


def test_each_rank_writes_its_own_shards_and_a_requeue_resumes_them_bit_for_bit(tmp_path, uninterrupted,
                                                                                   two_ranks_stopped):
    ck = copy_of(two_ranks_stopped[0], tmp_path)
    step_dir = os.path.realpath(ck / "latest")
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["world_size"] == 2 and manifest["step"] < STEPS, manifest
    for r in range(2):
        for name in ("model.pt", "optimizer.pt"):
            only_shards(os.path.join(step_dir, f"rank-{r}", name), 2)
    resumed = run(2, ck)
    assert all("resumed from" in err for _, _, err, _ in resumed), [err for _, _, err, _ in resumed]
    assert digest_of(resumed) == uninterrupted, "the resumed sharded model differs from the uninterrupted one"


# Part 3: the checkpoint is DCP's too. The committing rank merged every rank's index into .metadata
# (in the manifest, hashed like the rest), and dcp.load, with no hydro imported and no process
# group, gathers the 2 ranks' chunks into one unsharded model and AdamW: the saved bits.
def test_torch_distributed_checkpoint_loads_the_ranks_shards_without_hydro(two_ranks_stopped):
    ck, stopped = two_ranks_stopped
    step_dir = os.path.realpath(ck / "latest")
    with open(os.path.join(step_dir, "manifest.json")) as f:
        assert ".metadata" in {m["name"] for m in json.load(f)["files"]}
    assert dcp_digest(step_dir) == {d["saved"] for _, _, _, d in stopped}.pop(), "DCP loaded other bits than saved"


# Every rank draws the same batch here, so the averaged gradient is each rank's own, exactly, and a
# run on 1 rank ends with the 2 ranks' bits: a resume on another number of ranks must too.
def test_two_ranks_shards_resume_on_one_rank_and_end_with_the_uninterrupted_bits(tmp_path, uninterrupted,
                                                                                 two_ranks_stopped):
    ck, stopped = copy_of(two_ranks_stopped[0], tmp_path), two_ranks_stopped[1]
    saved = {d["saved"] for _, _, _, d in stopped}
    resumed = run(1, ck)
    assert "resharded: checkpoint of 2 ranks, this job has 1" in resumed[0][2], resumed[0][2]
    assert {d["resumed"] for _, _, _, d in resumed} == saved, "the resumed state differs from the saved one"
    assert digest_of(resumed) == uninterrupted, "resumed on 1 rank, the model differs from the uninterrupted one"


@pytest.fixture(scope="module")
def four_ranks_checkpoint(tmp_path_factory):
    """A checkpoint of 4 ranks' shards (SIGTERM at step STOP_AT) and the digest of its saved state."""
    ck = tmp_path_factory.mktemp("four") / "ck"
    stopped = stopped_for_requeue(4, ck)
    saved = {d["saved"] for _, _, _, d in stopped}
    assert len(saved) == 1, saved
    return ck, saved.pop()


# 4 ranks' shards on 2 and on 3 ranks. The weights and the optimizer's state at the resume are the
# saved bits. On 3 ranks the 4 rows of the last layer split 2, 2 and 0 (FSDP2 pads), and each rank
# reads its rows from wherever the 4 ranks' chunks hold them (1 row each). The steps after are not
# compared with a run never stopped: a sum of 4 or 3 equal gradients may round where one of 2
# does not.
@pytest.mark.parametrize("ranks", [2, 3])
def test_four_ranks_shards_resume_on_fewer_ranks_with_the_saved_state(tmp_path, four_ranks_checkpoint, ranks):
    ck, saved = four_ranks_checkpoint
    mine = copy_of(ck, tmp_path)  # each resume trains on and commits its own checkpoints
    resumed = run(ranks, mine)
    for _, _, err, _ in resumed:
        assert f"resharded: checkpoint of 4 ranks, this job has {ranks}" in err, err
    assert {d["resumed"] for _, _, _, d in resumed} == {saved}, "the resumed state differs from the saved one"
    digest_of(resumed)  # every rank finished, with the same weights


def test_one_ranks_async_checkpoint_resumes_on_two_ranks(tmp_path, uninterrupted):
    ck = tmp_path / "ck"
    async_mode = {"HYDRO_CKPT_MODE": "async"}
    stopped = stopped_for_requeue(1, ck, async_mode)
    # The shards are copied into hydro's reused buffers: nothing falls back to torch.save on the
    # training thread.
    assert "serializing on the training thread" not in stopped[0][2], stopped[0][2]
    assert dcp_digest(os.path.realpath(ck / "latest")) == stopped[0][3]["saved"], "DCP loaded other bits than saved"
    two = run(2, ck)
    assert all("resumed from" in err for _, _, err, _ in two), [err for _, _, err, _ in two]
    assert digest_of(two) == uninterrupted, "resumed on 2 ranks, the model differs from the uninterrupted one"


# Async mode with several ranks: tracking the sharded model makes every rank write its own shards on
# its background thread, committed by the ranks together, while training goes on and the ranks vote
# at each step's end. Checkpoints every 2 steps run beside the training; SIGTERM's waits for the
# one in flight and writes its own. The first run copies behind (HYDRO_ASYNC_COPY=behind: the copies
# run on after save() returns, until the next optimizer step), the resumed one at save.
def test_async_mode_with_several_ranks_writes_each_ranks_shards_and_resumes_bit_for_bit(tmp_path, uninterrupted):
    ck = tmp_path / "ck"
    async_every_2 = {"HYDRO_CKPT_MODE": "async", "HYDRO_CKPT_EVERY": "2"}
    stopped = stopped_for_requeue(2, ck, {**async_every_2, "HYDRO_ASYNC_COPY": "behind"})
    for _, _, err, _ in stopped:
        assert "serializing on the training thread" not in err, err
    assert "async checkpoint of step 2 committed" in stopped[0][2], stopped[0][2]
    step_dir = os.path.realpath(ck / "latest")
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["world_size"] == 2 and manifest["step"] >= STOP_AT, manifest
    for r in range(2):
        for name in ("model.pt", "optimizer.pt"):
            only_shards(os.path.join(step_dir, f"rank-{r}", name), 2)
    saved = {d["saved"] for _, _, _, d in stopped}
    assert len(saved) == 1 and dcp_digest(step_dir) == saved.pop(), "DCP loaded other bits than saved"
    resumed = run(2, ck, async_every_2)
    assert all("resumed from" in err for _, _, err, _ in resumed), [err for _, _, err, _ in resumed]
    assert digest_of(resumed) == uninterrupted, "resumed from async shards, the model differs from the uninterrupted one"


# A kill -9 of one rank inside a sharded save (rank 1 stops writing its shards in its second save,
# of step 4, and is killed there; then rank 0, as Slurm ends the step's other tasks): the ranks'
# commit never took rank 1's shards, `latest` is still step 2's checkpoint, and the job resumes it
# to the uninterrupted run's end. In async mode the save was on rank 1's background thread.
@pytest.mark.parametrize("mode", ["sync_any", "async"])
def test_a_rank_killed_inside_a_sharded_save_leaves_the_previous_checkpoint(tmp_path, uninterrupted, mode):
    ck = tmp_path / "ck"
    port = free_port()
    extra = {"HYDRO_CKPT_MODE": mode, "HYDRO_CKPT_EVERY": "2", "FSDP_TRAIN_STOP_IN_SAVE": "2"}
    procs = [spawn([sys.executable, WORKER, str(LONG)], env=rank_env(r, 2, port, ck, extra),
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    guard = threading.Timer(240, lambda: [p.kill() for p in procs])  # a rank that never stops fails the test
    guard.start()
    for line in procs[1].stdout:
        if "in save 2" in line:
            break
    guard.cancel()
    for p in reversed(procs):
        p.kill()
        p.communicate(timeout=60)
    assert os.path.basename(os.path.realpath(ck / "latest")) == "step-000000000002"
    assert not [n for n in os.listdir(ck) if n.startswith("step-") and n != "step-000000000002"], os.listdir(ck)
    resumed = run(2, ck)
    assert all("resumed from" in err and "at step 2" in err for _, _, err, _ in resumed), [e for _, _, e, _ in resumed]
    assert digest_of(resumed) == uninterrupted, "resumed after the kill, the model differs from the uninterrupted one"


def test_an_optimizer_of_sharded_parameters_tracked_without_its_model_is_refused_at_resume(tmp_path):
    results = run(1, tmp_path / "ck", {"FSDP_TRAIN_UNTRACKED_MODEL": "1"})
    status, _, err, _ = results[0]
    assert status != 0 and "track('optimizer')" in err and "track the model too" in err, err
