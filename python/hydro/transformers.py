"""hydro for the Hugging Face Trainer: `hydro.transformers.train(trainer)` in place of `trainer.train()`.

During training, the job gets what a hand-written loop gets from hydro.Runtime:
- a pause at the next operator on every thread (`scontrol suspend`, `hydroctl pause`, the pause
  signals), and a resume where it stopped;
- on SIGTERM (`scontrol requeue`, preemption, hydro-launch's time limit): a checkpoint at the end of
  the optimizer step, in hydro's atomic, durable, checksummed directory, then exit 75
  (hydro.EXIT_REQUEUE), which hydro-launch requeues;
- checkpoints every HYDRO_CKPT_EVERY steps, and the resume: the next `train(trainer)` continues from
  hydro's newest valid checkpoint.

What a checkpoint holds is what the Trainer's own holds, in its own formats: the weights
(`pytorch_model.bin`), the optimizer, the scheduler, the gradient scaler (fp16), the generators
(`rng_state.pth`) and the Trainer's state (`trainer_state.json`: the step, the logs, the stateful
callbacks'). On resume, hydro verifies its newest checkpoint and hands the Trainer those files as
`resume_from_checkpoint`, so that the Trainer's own resume runs: it loads them, skips the batches
already trained (the seedable sampler: the same order) and puts the generators back where they
were. The Trainer's own checkpoints (`save_strategy`) go on as configured; hydro needs none.

A step is an optimizer step (`state.global_step`): with gradient accumulation, checkpoints fall on
the steps, never between the batches of one. The checkpoint of a step is taken once the Trainer is
done with it: after its logging, evaluation and save (at an epoch's last step, the epoch's too), at
the next step's or epoch's begin. It holds their results (the log, best_metric, the generators an
evaluation drew from), and the resumed run starts at the next step, bit-for-bit, evaluations
included. A SIGTERM during a long evaluation is taken once it ends: KillWait must be longer.
Randomness in the data pipeline (a collator's masking, augmentation in the DataLoader's workers)
is drawn, on a resume mid-epoch, before the Trainer puts the generators back, as in the Trainer's
own resume: bit-for-bit then needs a pipeline without it, or one seeded by the sample.

Several ranks (DistributedDataParallel: `torchrun`, or `srun -n N` with hydro.export_env() called
before TrainingArguments): each rank writes its own copy of the state, with its own generators
(`rng_state_R.pth`), and all commit together (HYDRO_CKPT_MODE sync_any or sync_all; async, where
rank 0 writes for every rank, would lose the other ranks' generators and is refused). The Trainer's
ranks must be hydro's: the same number, in the same order. A Trainer that shards its state (FSDP,
DeepSpeed) is refused for now.
"""
import contextlib
import copy
import dataclasses
import json
import os
import random
import shutil
import tempfile

import numpy as np
import torch
from transformers import TrainerCallback
from transformers.trainer import OPTIMIZER_NAME, SCALER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.training_args import ParallelMode
from transformers.utils import WEIGHTS_NAME

from . import _C
from .runtime import Runtime, _load

__all__ = ["train", "Hydro"]

# hydro's file (NAME.pt) for each part of the Trainer's state, and the file the Trainer's resume reads.
_FILES = {"model": WEIGHTS_NAME, "optimizer": OPTIMIZER_NAME, "scheduler": SCHEDULER_NAME, "scaler": SCALER_NAME,
          "rng_state": "rng_state.pth"}
_STATE = "trainer_state"


def _trainer_file(name, args):
    """The file the Trainer's resume reads for part `name`: each rank's generators in a file of its
    own under several ranks (`_load_rng_state`'s rng_state_R.pth)."""
    if name == "rng_state" and args.world_size > 1:
        return f"rng_state_{args.process_index}.pth"
    return _FILES[name]


class _Part:
    """One part of the Trainer's state, read when a checkpoint is taken: the optimizer and the
    scheduler exist only once `train()` has made them."""

    def __init__(self, state_dict):
        self.state_dict = state_dict


def _rng_state(trainer):
    """The generators, as the Trainer's `_save_rng_state` writes them for one process (every
    device's CUDA generator under a distributed launch, as it does)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        distributed = trainer.args.parallel_mode == ParallelMode.DISTRIBUTED
        state["cuda"] = torch.cuda.random.get_rng_state_all() if distributed else torch.cuda.random.get_rng_state()
    return state


def _trainer_state(trainer):
    """The Trainer's state as its `_save_checkpoint` writes it: with the stateful callbacks' and
    the control's state (on a copy: the Trainer's own is left as it is)."""
    state = copy.deepcopy(trainer.state)
    state.total_flos += getattr(trainer, "current_flos", 0)  # what its store_flos() adds first
    for cb in trainer.callback_handler.callbacks + [trainer.control]:
        if isinstance(cb, ExportableState):
            name = type(cb).__name__
            if isinstance(state.stateful_callbacks.get(name), list):
                state.stateful_callbacks[name].append(cb.state())
            else:
                state.stateful_callbacks[name] = cb.state()
    return {"json": json.dumps(dataclasses.asdict(state), indent=2, sort_keys=True) + "\n"}  # save_to_json's


def _scaler(trainer):
    return getattr(getattr(trainer, "accelerator", None), "scaler", None)


def _track(rt, trainer):
    """Tracks each part of the Trainer's state; returns the files a resume finds, by part."""
    parts = {"model": lambda: trainer.model.state_dict(),
             "optimizer": lambda: trainer.optimizer.state_dict(),
             "scheduler": lambda: trainer.lr_scheduler.state_dict(),
             "rng_state": lambda: _rng_state(trainer),
             _STATE: lambda: _trainer_state(trainer)}
    if _scaler(trainer) is not None:
        parts["scaler"] = lambda: _scaler(trainer).state_dict()
    found = {}
    for name, state_dict in parts.items():
        rt.track(name, _Part(state_dict), on_resume=lambda path, name=name: found.__setitem__(name, path))
    return found


@contextlib.contextmanager
def _generators_kept():
    """The generators as they were before: the Trainer restores its own (rng_state) at its point in
    the epoch, and before that reads the global ones as its own run left them. Its sampler takes
    torch's initial seed when train() makes the DataLoader: a rank seeded apart (accelerate's
    set_seed(device_specific=True)) would otherwise shuffle with its saved seed, not the Trainer's."""
    state = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    cuda = torch.cuda.random.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.random.set_rng_state(state[2])
        if cuda is not None:
            torch.cuda.random.set_rng_state_all(cuda)


@contextlib.contextmanager
def _resume_folder(found, args):
    """The checkpoint hydro resumed from, laid out as the Trainer's `checkpoint-N` folder (links to
    hydro's verified files, and the state as JSON) in a private temporary folder; None when there is
    none."""
    if not found:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="hydro-transformers-")
    try:
        for name, path in found.items():
            if name == _STATE:
                with open(os.path.join(folder, TRAINER_STATE_NAME), "w") as f:
                    f.write(_load(path)["json"])
            else:
                os.symlink(path, os.path.join(folder, _trainer_file(name, args)))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Hydro(TrainerCallback):
    """The callback `train` adds: hydro's step end for each optimizer step, once the Trainer is done
    with it: after the step's logging, evaluation and save (and, at an epoch's last step, the
    epoch's), at the next step's or epoch's begin, or at the training's end (a SIGTERM during the
    last step or the final evaluation still checkpoints and exits 75: the requeued run then trains
    no more and does what follows train() again). A checkpoint then holds what they did (the log,
    the metrics, the generators an evaluation drew from), as the Trainer's own checkpoint does, and
    the resumed run starts where the Trainer would."""

    def __init__(self, runtime):
        self._rt = runtime
        self._done = None  # the step the Trainer ended, whose step end is due

    def on_step_end(self, args, state, control, **kwargs):
        self._done = state.global_step

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._step_end()

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_end()

    def on_train_end(self, args, state, control, **kwargs):
        self._step_end()

    def _step_end(self):
        step, self._done = self._done, None
        if step is not None and not self._rt.step_end(step):
            raise SystemExit(_C.EXIT_REQUEUE)  # checkpointed after SIGTERM: hydro-launch requeues


def _refuse_sharded(trainer):
    for kind in ("fsdp", "deepspeed"):
        if getattr(trainer, f"is_{kind}_enabled", False):
            raise NotImplementedError(f"hydro.transformers.train: a Trainer with {kind} (TrainingArguments.{kind}) "
                                      "shards its state, which hydro.transformers does not save yet: use "
                                      "DistributedDataParallel (no fsdp, no deepspeed), or write the loop with "
                                      "hydro.Runtime (FSDP2)")


def _check_ranks(rt, args):
    """The Trainer's ranks are hydro's (Slurm's tasks, or torchrun's workers), and each rank
    writes its own generators."""
    ranks, rank = rt.settings["world_size"], rt.settings["rank"]
    if (args.world_size, args.process_index) != (ranks, rank):
        raise RuntimeError(f"hydro.transformers.train: this is rank {rank} of {ranks} (hydro.dist_env(): Slurm's "
                           f"tasks or torchrun's), but the Trainer's rank {args.process_index} of {args.world_size} "
                           "(TrainingArguments): under srun -n N, call hydro.export_env() before TrainingArguments")
    if ranks > 1 and rt.settings["mode"] == "async":
        raise ValueError(f"hydro.transformers.train: with {ranks} ranks, HYDRO_CKPT_MODE=async (rank 0 writes for "
                         "every rank) would lose the other ranks' generators: set HYDRO_CKPT_MODE=sync_any or sync_all")


def train(trainer, **kwargs):
    """`trainer.train(**kwargs)` under hydro (see help(hydro.transformers)): resumes from hydro's
    newest valid checkpoint, pauses at operators, checkpoints at step ends (on SIGTERM: then exits
    75). Returns what `trainer.train` returns."""
    if "resume_from_checkpoint" in kwargs:
        raise TypeError("hydro.transformers.train: hydro resumes from its newest checkpoint in HYDRO_CKPT_DIR "
                        "(or HYDRO_RESUME_FROM): leave out resume_from_checkpoint")
    _refuse_sharded(trainer)
    with Runtime() as rt:
        _check_ranks(rt, trainer.args)
        found = _track(rt, trainer)
        with _generators_kept():  # hydro's own restore of them is for loops that have no restore of their own
            rt.resume()
        callback = Hydro(rt)
        trainer.add_callback(callback)
        try:
            with _resume_folder(found, trainer.args) as folder:
                return trainer.train(resume_from_checkpoint=folder, **kwargs)
        finally:
            trainer.remove_callback(callback)
