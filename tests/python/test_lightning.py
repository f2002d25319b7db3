# hydro.lightning (issue 35): a Lightning fit with one callback pauses at an operator, checkpoints
# on SIGTERM at a step's end and exits 75, and the next fit, with no ckpt_path, resumes there and
# ends with the weights of a fit never interrupted. Real Lightning (the pinned `lightning`), on the
# CPU; examples/lightning_loop.py is the training (DataLoader workers with augmentation, dropout,
# several epochs). Main tier only: Debian's torch 1.13.1 has no Lightning 2.6.
import os
import signal

import pytest
import torch

import hydro
import hydro.lightning
from conftest import HERE, committed, run_example, step_of, weights_digest as digest

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "lightning_loop.py")
# 2048 samples in batches of 64: 32 batches an epoch; 40 steps of 2 batches run into a third epoch.
ARGS = ["--steps", "40", "--samples", "2048", "--log-every", "1", "--hidden", "64"]


def fit(python, ckpt_dir, *extra, step_ms=0, until=None, signals=()):
    return run_example([python, EXAMPLE, *ARGS, *extra, "--step-ms", str(step_ms)], ckpt_dir, until, signals)


# Two batches a step (gradient accumulation): a SIGTERM may land between the two batches of a step,
# and the checkpoint must wait for its end. (One batch a step: the Slurm tests slurm.lightning.*.)
ACCUMULATE = ["--accumulate", "2"]


def tiny():
    """A LightningModule of one Linear layer, on 8 samples in batches of 4."""
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.lin(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return hydro.DataLoader(torch.randn(8, 4), batch_size=4)

    return Tiny()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The digest of a fit never interrupted."""
    import sys
    rc, out = fit(sys.executable, tmp_path_factory.mktemp("ref"), *ACCUMULATE)
    assert rc == 0, out[-3000:]
    return digest(out)


def test_sigterm_checkpoints_at_a_step_end_and_the_next_fit_resumes_there_bit_for_bit(python, tmp_path, reference):
    # SIGTERM in the middle of the second epoch (16 steps of 2 batches an epoch).
    rc, out = fit(python, tmp_path, *ACCUMULATE, step_ms=20, until=25, signals=[signal.SIGTERM])
    assert rc == hydro.EXIT_REQUEUE, out[-3000:]
    assert "checkpoint-and-exit requested by SIGTERM" in out
    assert "weights_digest=" not in out, "the fit ended after SIGTERM instead of exiting to be requeued"
    names = committed(tmp_path)
    assert names, out[-3000:]
    step = step_of(names[-1])
    # In the second epoch on an idle machine; the test's reading of the output may lag on a loaded
    # one and carry the signal later, which changes nothing asserted (any step but the last).
    assert 25 <= step < 40, "not after the signal and before the fit's end: move the signal"
    rc, out = fit(python, tmp_path, *ACCUMULATE)
    assert rc == 0, out[-3000:]
    assert f"at step {step}" in out
    assert f"step {step + 1} loss" in out and f"step {step} loss" not in out, "the resumed fit replayed a step"
    assert digest(out) == reference


def test_a_pause_at_an_operator_and_its_resume_change_nothing(python, tmp_path, reference):
    rc, out = fit(python, tmp_path, *ACCUMULATE, step_ms=20, until=10, signals=[signal.SIGUSR1, signal.SIGUSR2])
    assert rc == 0, out[-3000:]
    assert "paused at operator" in out and "resumed at operator" in out
    assert digest(out) == reference


def test_the_callback_keeps_hydros_signals_and_requeue_and_writes_lightnings_files_atomically(env, tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    env.setenv("HYDRO_CKPT_DIR", str(tmp_path / "ck"))
    seen = {}

    class Probe(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            # Lightning set its own SIGTERM handler as training started; hydro's is back in.
            seen["taken_back"] = hydro._C.reclaim_signal_handlers()
            seen["auto_requeue"] = trainer._accelerator_connector.cluster_environment.auto_requeue
            seen["io"] = type(trainer.strategy.checkpoint_io)
            trainer.save_checkpoint(tmp_path / "own.ckpt")

    env.setenv("SLURM_NTASKS", "1")  # Lightning's Slurm environment, as inside an srun step
    env.setenv("SLURM_JOB_NAME", "test")
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, plugins=[SLURMEnvironment(auto_requeue=True)],
                         callbacks=[hydro.lightning.Hydro(), Probe()])
    trainer.fit(tiny())
    assert seen["taken_back"] == [], "hydro's handlers were not put back when training started"
    assert seen["auto_requeue"] is False
    assert seen["io"] is hydro.lightning.AtomicCheckpointIO
    assert "state_dict" in torch.load(tmp_path / "own.ckpt", weights_only=False)
    assert not hydro._C.signal_handlers_installed(), "the Runtime outlived the fit"


def test_a_sigterm_that_lightnings_handler_took_before_training_started_still_checkpoints(env, tmp_path):
    """Lightning sets its SIGTERM handler after the callback's setup, and hydro takes SIGTERM back
    only when training starts: a SIGTERM in between (Lightning's sanity check, its loaders) reaches
    Lightning's handler, which would end the fit at the first batch without a checkpoint."""
    import lightning.pytorch as pl

    env.setenv("HYDRO_CKPT_DIR", str(tmp_path))

    class TermBeforeTraining(pl.Callback):  # before hydro's callback in the list: its hook runs first
        def on_train_start(self, trainer, module):
            signal.raise_signal(signal.SIGTERM)  # handled when it returns, on this (the main) thread
            assert trainer.received_sigterm, "Lightning's handler did not take it: nothing is tested"

    trainer = pl.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, callbacks=[TermBeforeTraining(), hydro.lightning.Hydro()])
    with pytest.raises(SystemExit) as ended:
        trainer.fit(tiny())
    assert ended.value.code == hydro.EXIT_REQUEUE
    assert committed(tmp_path) == ["step-000000000001"]
    assert not hydro._C.signal_handlers_installed(), "the Runtime outlived the fit"
