# hydro.transformers (issue 35): a Hugging Face Trainer run under `hydro.transformers.train(trainer)`
# pauses at an operator, checkpoints on SIGTERM at a step's end and exits 75, and the next run
# resumes there through the Trainer's own resume and ends with the weights of a run never
# interrupted. Real transformers (the pinned version), on the CPU; examples/hf_trainer.py is the
# training (a small GPT-2 with dropout, DataLoader workers, several epochs). Main tier only:
# Debian's torch 1.13.1 has no transformers 5.
import os
import signal
import sys

import pytest

import hydro
from conftest import HERE, run_example, weights_digest as digest

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "hf_trainer.py")
# 256 sequences in batches of 16, two batches a step: 8 steps an epoch; 28 steps run into a fourth.
ARGS = ["--steps", "28", "--samples", "256", "--log-every", "1", "--accumulate", "2"]


def run(python, ckpt_dir, step_ms=0, until=None, signals=()):
    return run_example([python, EXAMPLE, *ARGS, "--step-ms", str(step_ms)], ckpt_dir, until, signals)


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
    committed = sorted(p for p in os.listdir(tmp_path) if p.startswith("step-"))
    assert committed, out[-3000:]
    step = int(committed[-1].split("-")[1])
    assert 10 <= step < 16, "not in the second epoch: move the signal"
    rc, out = run(python, tmp_path)
    assert rc == 0, out[-3000:]
    assert f"resumed from {tmp_path}/{committed[-1]} at step {step}" in out
    assert f"step {step + 1} done" in out and f"step {step} done" not in out, "the resumed run replayed a step"
    assert digest(out) == reference


def test_a_pause_at_an_operator_and_its_resume_change_nothing(python, tmp_path, reference):
    rc, out = run(python, tmp_path, step_ms=30, until=5, signals=[signal.SIGUSR1, signal.SIGUSR2])
    assert rc == 0, out[-3000:]
    assert "paused at operator" in out and "resumed at operator" in out
    assert digest(out) == reference


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
    with pytest.raises(NotImplementedError, match="world_size 2"):
        hydro.transformers.train(trainer)
    assert not hydro._C.signal_handlers_installed(), "a refused train() left a Runtime"
