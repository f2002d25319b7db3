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

A train dataset that is a stream keeping its place (an IterableDataset with no length whose
state_dict() and load_state_dict() say and set where it is: a streaming datasets.IterableDataset,
torchdata's Stateful) resumes in O(1): the checkpoint holds the stream's state after the last
batch its steps trained on, the resumed run starts the stream there, and the Trainer skips nothing
(ignore_data_skip for that run). Read by DataLoader workers, each worker's copy of the stream has a
place of its own: hydro then has accelerate read it through torchdata's StatefulDataLoader for the
run (use_stateful_dataloader), which keeps them all (torchdata must be installed). Read by several
ranks, rank 0 reads it for all (accelerate's DataLoaderDispatcher, its default for a stream) through
the same StatefulDataLoader, and every rank resumes at rank 0's place. Any other IterableDataset (or
one each rank reads a copy of: dispatch_batches=False) is skipped as the Trainer skips it: by reading
every batch before the resumed step and dropping it.

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

from . import _C, _stream
from .restore import load_file
from .runtime import Runtime

__all__ = ["train", "Hydro"]

# hydro's file (NAME.pt) for each part of the Trainer's state, and the file the Trainer's resume reads.
_FILES = {"model": WEIGHTS_NAME, "optimizer": OPTIMIZER_NAME, "scheduler": SCHEDULER_NAME, "scaler": SCALER_NAME,
          "rng_state": "rng_state.pth"}
_STATE = "trainer_state"
_STREAM = "stream"  # the place of a stream that keeps it (_stream): hydro's alone, no file of the Trainer's


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


def _set_rng_state(state):
    """The generators put back from a dict of _rng_state's form (a list under "cuda": every
    device's), as the Trainer's `_load_rng_state` does."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        (torch.cuda.random.set_rng_state_all if isinstance(cuda, list) else torch.cuda.random.set_rng_state)(cuda)


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


def _track(rt, trainer, stream):
    """Tracks each part of the Trainer's state (and a stream's place); returns the files a resume
    finds, by part."""
    parts = {"model": lambda: trainer.model.state_dict(),
             "optimizer": lambda: trainer.optimizer.state_dict(),
             "scheduler": lambda: trainer.lr_scheduler.state_dict(),
             "rng_state": lambda: _rng_state(trainer),
             _STATE: lambda: _trainer_state(trainer)}
    if _scaler(trainer) is not None:
        parts["scaler"] = lambda: _scaler(trainer).state_dict()
    if stream is not None:
        parts[_STREAM] = lambda: {"state": stream.state_at(trainer.state.global_step)}
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
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.random.get_rng_state_all()
    try:
        yield
    finally:
        _set_rng_state(state)


@contextlib.contextmanager
def _stream_placed(trainer, stream, found):
    """With a checkpointed place of the stream: the stream starts there, and the Trainer skips no
    batch for this run (ignore_data_skip, then back as it was)."""
    path = found.pop(_STREAM, None)
    state = load_file(path)["state"] if path is not None and stream is not None else None
    if stream is not None:
        state = stream.agreed(state)  # several ranks: rank 0's, which reads for all
    if state is None:
        if path is not None:
            _C.log("warning: the train dataset's place at the checkpoint is unknown: the Trainer reads and drops "
                   "every batch before the resumed step")
        yield
        return
    stream.place(state)
    # The Trainer puts them back before its DataLoader's iterator draws a seed from torch's, when it
    # skips no batch; its own skip puts them back once the first step's batches are read: so here.
    stream.generators = load_file(found["rng_state"])
    _C.log("the train stream starts where the checkpoint's steps left it: no batch is read again")
    skip = trainer.args.ignore_data_skip
    trainer.args.ignore_data_skip = True
    try:
        yield
    finally:
        trainer.args.ignore_data_skip = skip


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
                    f.write(load_file(path)["json"])
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

    def __init__(self, runtime, stream=None):
        self._rt, self._stream = runtime, stream
        self._done = None  # the step the Trainer ended, whose step end is due

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if self._stream is not None:
            self._stream.train_begin(state.global_step, train_dataloader)

    def on_step_end(self, args, state, control, train_dataloader=None, **kwargs):
        self._done = state.global_step
        if self._stream is not None:
            self._stream.step_end(state.global_step, train_dataloader)

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._step_end()

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_end()
        if self._stream is not None and self._stream.generators is not None:
            _set_rng_state(self._stream.generators)
            self._stream.generators = None

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
        stream, why = _stream.keeper(trainer)
        if why is not None:
            _C.log(f"the train dataset is an IterableDataset, and {why}: a resume reads and drops every batch before "
                   "the resumed step, as the Trainer's own resume does")
        found = _track(rt, trainer, stream)
        with _generators_kept():  # hydro's own restore of them is for loops that have no restore of their own
            rt.resume()
        callback = Hydro(rt, stream)
        trainer.add_callback(callback)
        try:
            with _stream.reading(trainer, stream), _stream_placed(trainer, stream, found), \
                    _resume_folder(found, trainer.args) as folder:
                return trainer.train(resume_from_checkpoint=folder, **kwargs)
        finally:
            trainer.remove_callback(callback)
