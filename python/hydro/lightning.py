"""hydro for PyTorch Lightning: one line, `Trainer(..., callbacks=[hydro.lightning.Hydro()])`.

During `trainer.fit`, the job gets what a hand-written loop gets from hydro.Runtime:
- a pause at the next operator on every thread (`scontrol suspend`, `hydroctl pause`, the pause
  signals), and a resume where it stopped;
- on SIGTERM (`scontrol requeue`, preemption, hydro-launch's time limit): a checkpoint at the end of
  the step, in hydro's atomic, durable, checksummed directory, then exit 75 (hydro.EXIT_REQUEUE),
  which hydro-launch requeues;
- checkpoints every HYDRO_CKPT_EVERY steps, and the resume: `trainer.fit(model)` with no
  `ckpt_path` continues from hydro's newest valid checkpoint, at the exact batch when the loader is
  a hydro.DataLoader, and with torch's, Python's and numpy's generators as they were.

hydro's checkpoint holds what Lightning's own holds (`dump_checkpoint`: the weights, the optimizers
and schedulers, the loops' progress, the loaders' places, the callbacks', the precision plugin's),
and the generators besides. A step is an optimizer step (`trainer.global_step`): with gradient
accumulation, checkpoints fall on the steps, never between the batches of one.

A callback, not a plugin: `Trainer(plugins=...)` takes only Lightning's own kinds (precision,
checkpoint IO, cluster environment, layer sync), and none of them sees the end of a step. What the
callback changes in the Trainer, when `fit` sets up:
- the Slurm environment's auto-requeue is turned off: hydro checkpoints on SIGTERM and
  hydro-launch requeues, without `scontrol` (Lightning's handler would requeue from inside the job,
  with a checkpoint of its own that is not atomic);
- hydro's signal handlers are put back once Lightning has set its own SIGTERM handler (when
  training starts): Lightning's would end the fit at once, without a checkpoint (one it took
  before then is handed to hydro's);
- Lightning's own checkpoint files (ModelCheckpoint, `trainer.save_checkpoint`) are written
  atomically and durably (AtomicCheckpointIO), when the strategy had Lightning's default IO.
"""
import os
import signal
import sys

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch import Callback
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.plugins.io import TorchCheckpointIO

from . import _C
from .runtime import Runtime, _PythonRNG, atomic_save

__all__ = ["Hydro", "AtomicCheckpointIO"]


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint files, each written by hydro.atomic_save: a file is the old one or the
    whole new one, fsynced with its directory, never a torn one (Lightning#688: "unexpected EOF"
    on resume). Paths that are not local files (s3://, ...) go through Lightning's own IO."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        if not _is_local_file_protocol(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options (got {storage_options!r})")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_save(checkpoint, path)


class _TrainerState:
    """What hydro saves and resumes for a Trainer: Lightning's own checkpoint dict. Loading hands it
    to Lightning's checkpoint connector, which restores it as from `ckpt_path` while fit sets up."""

    def __init__(self, trainer):
        self.trainer = trainer

    def state_dict(self):
        return self.trainer._checkpoint_connector.dump_checkpoint(weights_only=False)

    def load_state_dict(self, checkpoint):
        # fit asked for no ckpt_path: Lightning's restore, next, takes this loaded checkpoint.
        self.trainer._checkpoint_connector._loaded_checkpoint = checkpoint


class _Generators:
    """torch's (CPU, and CUDA where it is in use), Python's and numpy's generator states."""

    def __init__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        self.python = _PythonRNG().state_dict()

    def restore(self):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        _PythonRNG().load_state_dict(self.python)


def _leave_requeue_to_hydro(trainer):
    env = trainer._accelerator_connector.cluster_environment
    if isinstance(env, SLURMEnvironment) and env.auto_requeue:
        env.auto_requeue = False


def _write_atomically(trainer):
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()


class Hydro(Callback):
    """Every hydro feature for `trainer.fit`: `Trainer(..., callbacks=[hydro.lightning.Hydro()])`.
    Settings come from the environment (HYDRO_*), as for hydro.Runtime (see help(hydro.lightning))."""

    def __init__(self):
        self.runtime = None
        self._resumed = None  # the generators as resumed, put back when training starts
        self._step = 0

    def setup(self, trainer, pl_module, stage):
        if stage != "fit" or self.runtime is not None:
            return
        _leave_requeue_to_hydro(trainer)
        _write_atomically(trainer)
        self.runtime = Runtime()
        self.runtime.track("lightning", _TrainerState(trainer))
        self._step = self.runtime.resume()
        # Lightning draws from the generators before the first batch (its sanity check, its
        # loaders): they are put back as resumed when training starts.
        self._resumed = _Generators() if self._step else None

    def on_train_start(self, trainer, pl_module):
        _C.reclaim_signal_handlers()
        connector = trainer._signal_connector
        if connector.received_sigterm:
            # It came between fit's setup and now, to Lightning's handler, which would end the fit
            # at the next batch without a checkpoint: hydro's, back in, takes it instead.
            connector.received_sigterm = False
            os.kill(os.getpid(), signal.SIGTERM)
        if self._resumed is not None:
            self._resumed.restore()
            self._resumed = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self._step:
            return  # no optimizer step yet (gradient accumulation): not a consistent point
        self._step = step
        if not self.runtime.step_end(step):
            sys.stdout.flush()
            raise SystemExit(_C.EXIT_REQUEUE)  # checkpointed after SIGTERM: hydro-launch requeues

    def teardown(self, trainer, pl_module, stage):
        if stage == "fit":
            self._close()

    def on_exception(self, trainer, pl_module, exception):
        self._close()  # the fit ends (exit 75 after the checkpoint, or an error): no teardown hook

    def _close(self):
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None

    @property
    def step(self):
        """The last optimizer step hydro saw (the step resumed from, before the first)."""
        return self._step
