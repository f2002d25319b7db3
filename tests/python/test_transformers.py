# hydro.transformers (issue 35): a Hugging Face Trainer run under `hydro.transformers.train(trainer)`
# pauses at an operator, checkpoints on SIGTERM at a step's end and exits 75, and the next run
# resumes there through the Trainer's own resume and ends with the weights of a run never
# interrupted. Real transformers (the pinned version), on the CPU; examples/hf_trainer.py is the
# training (a small GPT-2 with dropout, DataLoader workers, several epochs). Main tier only:
# Debian's torch 1.13.1 has no transformers 5. Two ranks (DistributedDataParallel over Gloo, each
# with its own dropout) as torchrun starts them; the ranks' store authenticates with MUNGE (ctest
# starts munged first: FIXTURES_REQUIRED munge).
import os
import re
import signal
import subprocess
import sys

import pytest
import torch

import hydro
from conftest import HERE, committed, free_port, rank_env, run_example, step_of, weights_digest as digest
from forkserver import spawn

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "hf_trainer.py")
# 256 sequences in batches of 16, two batches a step: 8 steps an epoch; 28 steps run into a fourth.
ARGS = ["--steps", "28", "--samples", "256", "--log-every", "1", "--accumulate", "2"]


def run(python, ckpt_dir, step_ms=0, until=None, signals=(), extra=()):
    return run_example([python, EXAMPLE, *ARGS, "--step-ms", str(step_ms), *extra], ckpt_dir, until, signals)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The digest of a run never interrupted."""
    rc, out = run(sys.executable, tmp_path_factory.mktemp("ref"))
    assert rc == 0, out[-3000:]
    return digest(out)


def test_sigterm_checkpoints_at_a_step_end_and_the_next_run_resumes_there_bit_for_bit(python, tmp_path, reference):
    # SIGTERM in the second epoch; two batches a step, so it may land between the two of a step.
    rc, out = run(python, tmp_path, step_ms=30, until=10, signals=[signal.SIGTERM])
    assert rc == hydro.EXIT_REQUEUE, out[-3000:]
    assert "checkpoint-and-exit requested by SIGTERM" in out
    assert "weights_digest=" not in out, "the run ended after SIGTERM instead of exiting to be requeued"
    names = committed(tmp_path)
    assert names, out[-3000:]
    step = step_of(names[-1])
    # In the second epoch on an idle machine; the test's reading of the output may lag on a loaded
    # one and carry the signal later, which changes nothing asserted (any step but the last).
    assert 10 <= step < 28, "not after the signal and before the run's end: move the signal"
    rc, out = run(python, tmp_path)
    assert rc == 0, out[-3000:]
    assert f"resumed from {tmp_path}/{names[-1]} at step {step}" in out
    assert f"step {step + 1} done" in out and f"step {step} done" not in out, "the resumed run replayed a step"
    assert digest(out) == reference


def uninterrupted_then_stopped_and_resumed(python, tmp_path, extra):
    """A run never interrupted, then one stopped by SIGTERM near step 10 and run again, each with
    `extra`: (the first's digest, the step checkpointed, the stopped run's output, the resumed's)."""
    rc, out = run(python, tmp_path / "ref", extra=extra)
    assert rc == 0, out[-3000:]
    reference = digest(out)
    ck = tmp_path / "ck"
    rc, stopped = run(python, ck, step_ms=30, until=10, signals=[signal.SIGTERM], extra=extra)
    assert rc == hydro.EXIT_REQUEUE, stopped[-3000:]
    step = step_of(committed(ck)[-1])
    rc, resumed = run(python, ck, extra=extra)
    assert rc == 0, resumed[-3000:]
    return reference, step, stopped, resumed


def test_a_step_is_checkpointed_after_its_evaluation_which_the_resumed_run_does_not_repeat(python, tmp_path):
    # An evaluation at every step: its DataLoader draws from torch's generator, so a checkpoint
    # taken before it would resume with other dropout; and its metrics must be in the checkpoint.
    reference, step, stopped, out = uninterrupted_then_stopped_and_resumed(python, tmp_path, ["--eval-every", "1"])
    assert f"evaluated at step {step}:" in stopped, stopped[-3000:]
    assert f"evaluated at step {step}:" not in out and f"evaluated at step {step + 1}:" in out, out[-3000:]
    assert digest(out) == reference


def a_stream_resumes_at_its_place(python, tmp_path, workers, ahead):
    """An endless IterableDataset with state_dict() and load_state_dict(), read by `workers`
    DataLoader workers (0: the training process): the Trainer's own resume reads and drops every
    batch before the resumed step; under hydro the stream starts at the checkpoint's place instead,
    giving only the batches left and the `ahead` that the readers read ahead, and the weights end
    the same."""
    extra = ["--stream", "--workers", str(workers)]
    reference, step, _, out = uninterrupted_then_stopped_and_resumed(python, tmp_path, extra)
    assert "the train stream starts where the checkpoint's steps left it" in out, out[-3000:]
    assert_read_only_what_was_left(out, step, 1, ahead)
    assert digest(out) == reference


def assert_read_only_what_was_left(out, step, ranks, ahead):
    """Resumed at `step`, the stream (read by the run whose output is `out`) gave the samples of the
    steps left, for `ranks` ranks, and at most `ahead` batches more: those its readers read ahead."""
    given = int(re.search(r"^stream: (\d+) samples given$", out, re.M).group(1))
    left, batch = (28 - step) * ranks * 2 * 16, 16  # ARGS: 28 steps of 2 batches of 16 for each rank
    assert left <= given <= left + ahead * batch, f"resumed at step {step}, the stream gave {given} samples for {left}"


def test_a_stream_that_keeps_its_place_resumes_there_without_reading_a_batch_again(python, tmp_path):
    a_stream_resumes_at_its_place(python, tmp_path, workers=0, ahead=2)  # accelerate's batch ahead, and one


def test_a_stream_read_by_dataloader_workers_resumes_at_each_workers_place(python, tmp_path):
    # torchdata's StatefulDataLoader (hydro turns accelerate's use_stateful_dataloader on) keeps
    # each worker's place, and whose batch is next. Each of the 2 workers reads 2 batches ahead (its
    # prefetch), and on a resume reads again the few since torchdata's last snapshot of its place
    # (at most 2 here: 9 batches in all were measured), however far into the stream the step is.
    a_stream_resumes_at_its_place(python, tmp_path, workers=2, ahead=2 + 2 * (2 + 2))


def test_a_pause_at_an_operator_and_its_resume_change_nothing(python, tmp_path, reference):
    rc, out = run(python, tmp_path, step_ms=30, until=5, signals=[signal.SIGUSR1, signal.SIGUSR2])
    assert rc == 0, out[-3000:]
    assert "paused at operator" in out and "resumed at operator" in out
    assert digest(out) == reference


def run_ranks(ck, stop_at=None, extra=()):
    """examples/hf_trainer.py on 2 ranks (torchrun's variables) to its end, or, with stop_at, each
    rank sent SIGTERM (as Slurm does) once rank 0 printed that step. Returns [(status, output)]."""
    port, procs = free_port(), []
    for r in range(2):
        env = rank_env(r, 2, port, ck)
        procs.append(spawn([sys.executable, EXAMPLE, *ARGS, "--step-ms", "30" if stop_at else "0", *extra],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    head = []
    if stop_at is not None:
        for line in procs[0].stdout:
            head.append(line)
            if line.startswith("step ") and int(line.split()[1]) >= stop_at:
                break
        for p in procs:
            p.send_signal(signal.SIGTERM)
    out = []
    try:
        for i, p in enumerate(procs):
            text = ("".join(head) if i == 0 else "") + p.communicate(timeout=300)[0]
            print(f"--- rank {i}: status {p.returncode}\n{text}")  # whole in a failure's report
            out.append((p.returncode, text))
    except subprocess.TimeoutExpired:
        for p in procs[len(out) + 1:]:  # a rank hung: the stacks of those after it too
            try:
                p.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        raise
    return out


def test_two_ranks_resume_each_its_own_generators_bit_for_bit(tmp_path):
    # The ranks drop out apart (each its own seed), so a rank given another's generators, or the
    # Trainer's sampler shuffling with a restored seed, would show in the weights.
    whole = run_ranks(tmp_path / "ref")
    assert [s for s, _ in whole] == [0, 0]
    reference = {digest(o) for _, o in whole}
    assert len(reference) == 1
    ck = tmp_path / "ck"
    stopped = run_ranks(ck, stop_at=5)
    assert [s for s, _ in stopped] == [hydro.EXIT_REQUEUE] * 2
    step_dir = ck / committed(ck)[-1]
    own = [torch.load(step_dir / f"rank-{r}" / "rng_state.pt", weights_only=False)["cpu"] for r in (0, 1)]
    assert not torch.equal(*own), "the ranks saved the same generator"
    resumed = run_ranks(ck)
    assert [s for s, _ in resumed] == [0, 0]
    assert all(f"resumed from {step_dir}" in o for _, o in resumed)
    assert {digest(o) for _, o in resumed} == reference


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_read_by_rank_0_for_two_ranks_resumes_every_rank_at_its_place(tmp_path, workers):
    # accelerate's DataLoaderDispatcher: rank 0's loader draws a batch for each rank and sends each
    # its own, reading one such pair ahead. A resume that started the stream one batch off would
    # train on other samples, which the weights show (as they did from accelerate's own snapshot).
    extra = ["--stream", "--workers", str(workers)]
    whole = run_ranks(tmp_path / "ref", extra=extra)
    assert [s for s, _ in whole] == [0, 0]
    reference = {digest(o) for _, o in whole}
    assert len(reference) == 1
    ck = tmp_path / "ck"
    stopped = run_ranks(ck, stop_at=10, extra=extra)
    assert [s for s, _ in stopped] == [hydro.EXIT_REQUEUE] * 2
    step = step_of(committed(ck)[-1])
    resumed = run_ranks(ck, extra=extra)
    assert [s for s, _ in resumed] == [0, 0]
    assert all("the train stream starts where the checkpoint's steps left it" in o for _, o in resumed)
    assert {digest(o) for _, o in resumed} == reference
    # Rank 0 reads for both: the pair read ahead; each worker's prefetch and reads since its snapshot.
    assert_read_only_what_was_left(resumed[0][1], step, 2, ahead=2 * 2 + workers * (2 + 2))


def test_the_trainer_and_hydro_must_agree_on_the_ranks(env, tmp_path):
    from hydro.transformers import _check_ranks

    class Args:
        world_size, process_index = 2, 1

    class Rt:
        settings = {"world_size": 1, "rank": 0, "mode": "sync_any"}

    with pytest.raises(RuntimeError, match=r"rank 0 of 1 .*the Trainer's rank 1 of 2 .*hydro.export_env\(\)"):
        _check_ranks(Rt, Args)
    Rt.settings = {"world_size": 2, "rank": 1, "mode": "async"}
    with pytest.raises(ValueError, match="HYDRO_CKPT_MODE=async"):
        _check_ranks(Rt, Args)
    Rt.settings["mode"] = "sync_all"
    _check_ranks(Rt, Args)


def test_what_the_trainer_cannot_be_given_is_refused_by_name(env, tmp_path):
    import torch
    import hydro.transformers
    from transformers import Trainer, TrainingArguments

    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=1)
    trainer = Trainer(model=torch.nn.Linear(2, 2), args=args)
    with pytest.raises(TypeError, match="leave out resume_from_checkpoint"):
        hydro.transformers.train(trainer, resume_from_checkpoint=True)
    env.setattr(TrainingArguments, "world_size", property(lambda self: 2))
    with pytest.raises(RuntimeError, match="the Trainer's rank 0 of 2"):
        hydro.transformers.train(trainer)
    env.setattr(trainer, "is_fsdp_enabled", True)
    with pytest.raises(NotImplementedError, match=r"TrainingArguments.fsdp"):
        hydro.transformers.train(trainer)
    assert not hydro._C.signal_handlers_installed(), "a refused train() left a Runtime"
