"""The place of a Hugging Face Trainer's train stream, kept for an O(1) resume (hydro.transformers).

A stream keeps its place when it is an IterableDataset with no length whose state_dict() and
load_state_dict() say and set where it is (a streaming datasets.IterableDataset, torchdata's
Stateful). Its place after a step is then kept by one of two keepers:
- InProcess, where the training process alone reads it (no DataLoader workers, one rank): the
  dataset, wrapped, notes the stream's state after each batch;
- InLoader, where DataLoader workers read it: torchdata's StatefulDataLoader, which
  accelerate uses when its DataLoaderConfiguration says use_stateful_dataloader (hydro turns it on
  for the run), holds each worker's state of the stream, and the loader's state is noted after each
  optimizer step;
- InDispatcher, where several ranks train and rank 0 reads the stream for them all (accelerate's
  DataLoaderDispatcher, its default for a stream), through the same StatefulDataLoader: rank 0 notes
  the loader's state before each batch it draws, and a resume starts every rank at rank 0's.
"""
import collections
import contextlib
import copy
import importlib.util

import torch
from transformers.trainer_utils import has_length


class InProcess(torch.utils.data.IterableDataset):
    """The train dataset as the Trainer reads it in the training process: it notes the stream's
    state after each batch it gives, since the Trainer and accelerate read batches ahead of the step
    that trains on them."""

    def __init__(self, dataset, batch, per_step):
        self.dataset, self.batch, self.per_step = dataset, batch, per_step
        self.states = collections.OrderedDict()  # samples given in this pass -> the state after them
        self.keep = 2 * per_step + 8  # batches: a step's accumulation read ahead, and accelerate's one more
        self.first_step = None  # the step this run started from (train_begin)
        self.passes = 0
        self.generators = None  # a resume's, put back at its first step's begin (Hydro.on_step_begin)

    def __iter__(self):
        self.passes += 1
        self.states.clear()
        self.states[0] = copy.deepcopy(self.dataset.state_dict())
        for n, sample in enumerate(self.dataset, 1):
            if n % self.batch == 0:
                self.states[n] = copy.deepcopy(self.dataset.state_dict())
                if len(self.states) > self.keep:
                    self.states.popitem(last=False)
            yield sample

    def __getattr__(self, name):  # set_epoch and the like: the stream's own
        if name == "dataset":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def train_dataset(self):
        return self

    def place(self, state):
        self.dataset.load_state_dict(state)

    def train_begin(self, step, dataloader):
        self.first_step = step

    def step_end(self, step, dataloader):
        pass

    def state_at(self, step):
        """The stream's state after the last batch of `step`; None where it is not known (a second
        pass over a stream that ended, a step read further back than the states kept)."""
        if self.passes != 1 or self.first_step is None:
            return None
        return self.states.get((step - self.first_step) * self.per_step * self.batch)

    def agreed(self, state):
        """The checkpoint's state as this rank resumes from it (one rank here: its own)."""
        return state


class InLoader:
    """The StatefulDataLoader's state (the stream's in each worker, and which worker gives the next
    batch) after each optimizer step, as accelerate gives it: the batches it reads ahead are not
    counted."""

    KEEP = 4  # steps: a checkpoint is taken at the next step's begin

    def __init__(self, dataset):
        self.dataset = dataset
        self.states = collections.OrderedDict()  # step -> the loader's state after it
        self.pending = None  # a resume's state, loaded into the train DataLoader at train_begin
        self.generators = None

    def train_dataset(self):
        return self.dataset

    def place(self, state):
        self.pending = state

    def train_begin(self, step, dataloader):
        if self.pending is not None:
            dataloader.load_state_dict(self.pending)
            self.pending = None

    def step_end(self, step, dataloader):
        self.states[step] = copy.deepcopy(dataloader.state_dict())
        if len(self.states) > self.KEEP:
            self.states.popitem(last=False)

    def state_at(self, step):
        return self.states.get(step)

    def agreed(self, state):
        return state


class InDispatcher(InLoader):
    """Several ranks, rank 0 reading the stream for all: accelerate's DataLoaderDispatcher draws,
    for each step's batch, a batch for each rank (one, split, with split_batches) and concatenates
    them. Its own note of the loader's state (state_dict()) is taken before the last draw of the
    next batch, which it reads ahead: not the place after a step. hydro notes the loader's state
    before every draw instead, by the draws since this run began, through accelerate's hook for that
    note (adjust_state_dict_for_prefetch), and keeps the one after each step's last draw."""

    def __init__(self, dataset, args):
        super().__init__(dataset)
        self.rank, self.ranks, self.per_step = args.process_index, args.world_size, args.gradient_accumulation_steps
        self.draws = None  # this run's first pass: draws so far -> the loader's state before the next
        self.drawn = self.draws_per_step = self.first_step = self.first_pass = None

    def train_begin(self, step, dataloader):
        from accelerate.data_loader import DataLoaderDispatcher
        if not issubclass(type(dataloader), DataLoaderDispatcher):  # keeper() chose this for accelerate's default
            raise RuntimeError(f"hydro: the train stream is read through a {type(dataloader).__name__}, not accelerate's "
                               "DataLoaderDispatcher: hydro cannot keep its place on several ranks")
        if self.rank == 0:  # the other ranks' loaders draw nothing
            super().train_begin(step, dataloader)
        self.pending = None
        self.draws, self.drawn, self.first_step, self.first_pass = collections.OrderedDict(), 0, step, dataloader.iteration
        self.draws_per_step = self.per_step * (1 if dataloader.split_batches else self.ranks)
        dataloader.adjust_state_dict_for_prefetch = lambda: self.noted(dataloader)

    def noted(self, dataloader):
        """Called by the dispatcher before each draw on rank 0 (and once more at the stream's end)."""
        if self.draws is None or dataloader.iteration != self.first_pass or dataloader.end_of_dataloader:
            self.draws = None  # a later pass, or the end of this one: its places are not kept
            return
        self.draws[self.drawn] = copy.deepcopy(dataloader.dl_state_dict)
        self.drawn += 1
        if len(self.draws) > 2 * self.draws_per_step + self.ranks + 8:  # a step's draws, and the batch read ahead
            self.draws.popitem(last=False)

    def step_end(self, step, dataloader):
        pass

    def state_at(self, step):
        if self.rank != 0 or self.draws is None:
            return None
        return self.draws.get((step - self.first_step) * self.draws_per_step)

    def agreed(self, state):
        """Rank 0's state on every rank: a resume starts every rank at the same place, or none."""
        from accelerate.utils import broadcast_object_list
        return broadcast_object_list([state])[0]


def keeper(trainer):
    """(the keeper of the train stream's place, None), or (None, why a resume reads and drops every
    batch before the resumed step instead), or (None, None) for a dataset that is no stream."""
    data, args = trainer.train_dataset, trainer.args
    if not isinstance(data, torch.utils.data.IterableDataset):
        return None, None
    if not all(callable(getattr(data, m, None)) for m in ("state_dict", "load_state_dict")):
        return None, "it has no state_dict() and load_state_dict() to keep its place"
    if has_length(data):
        return None, "it has a length (the Trainer's epochs over it)"
    if args.world_size > 1 and trainer.accelerator.dataloader_config.dispatch_batches is False:
        return None, ("each rank reads its own copy (dispatch_batches=False); hydro keeps the place of a stream that "
                      "rank 0 reads for every rank, accelerate's default")
    if args.world_size == 1 and args.dataloader_num_workers == 0:
        return InProcess(data, args.train_batch_size, args.gradient_accumulation_steps), None
    if importlib.util.find_spec("torchdata") is None:
        readers = "rank 0 reads it for several ranks" if args.world_size > 1 else "DataLoader workers read it"
        return None, f"{readers}, whose place only torchdata's StatefulDataLoader keeps: pip install torchdata"
    if args.world_size > 1:
        return InDispatcher(data, args), None
    return InLoader(data), None


@contextlib.contextmanager
def reading(trainer, keeper):
    """The Trainer reads its train stream through `keeper` for the run: InProcess as its train
    dataset; InLoader and InDispatcher through accelerate's StatefulDataLoader
    (use_stateful_dataloader, then back as it was)."""
    dataset, config = trainer.train_dataset, trainer.accelerator.dataloader_config
    stateful = getattr(config, "use_stateful_dataloader", False)
    if keeper is not None:
        trainer.train_dataset = keeper.train_dataset()
        config.use_stateful_dataloader = stateful or isinstance(keeper, InLoader)  # InDispatcher's too
    try:
        yield
    finally:
        trainer.train_dataset = dataset
        config.use_stateful_dataloader = stateful
