"""Samplers that keep their place, and a DataLoader that resumes at the exact next batch.

The order is the C++ sampler's (hydro/sampler.h), which is torch.utils.data.DistributedSampler's
exactly: torch.randperm(n) with the seed seed + epoch, then padding or drop_last, then every
num_replicas-th index from `rank`.
"""
import collections
import os
import random
import sys

import torch
import torch.utils.data as tud

from . import _C


def _world(num_replicas, rank):
    if num_replicas is None or rank is None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            w, r = torch.distributed.get_world_size(), torch.distributed.get_rank()
        else:
            env = _C.dist_env()  # RANK/WORLD_SIZE, else the Slurm step's
            r, w = env["rank"], env["world_size"]
        num_replicas = w if num_replicas is None else num_replicas
        rank = r if rank is None else rank
    return num_replicas, rank


class InterruptibleDistributedSampler(tud.DistributedSampler):
    """torch.utils.data.DistributedSampler that remembers where the epoch stands.

    A DistributedSampler (a subclass, with its order), so that a framework that shards a loader by
    putting a DistributedSampler in it (Lightning, Accelerate) sees one already there and keeps it.

    `epoch` and set_epoch() as in torch; a new shuffle every epoch, also when set_epoch() is never
    called. state_dict() records the epoch and the samples taken; load_state_dict() continues the
    epoch at the next sample (on another number of ranks too, without losing or repeating any).
    With a plain torch DataLoader and num_workers=0 the samples handed out are the samples taken;
    otherwise call advance(n) for the n samples trained on (cycling_utils' API), or use
    hydro.DataLoader, which does it for you.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        num_replicas, rank = _world(num_replicas, rank)
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed) & 0xFFFFFFFFFFFFFFFF, bool(drop_last)
        self._order = _C.SamplerOrder(len(dataset), num_replicas, rank, self.seed, self.shuffle, self.drop_last)
        self._read_ahead = 1  # counting what is handed out: one at a time, so handed out == taken

    def __iter__(self):
        self._order.reset()  # back to the position taken; a finished epoch moves to the next
        return self._indices()

    def _indices(self):
        while True:
            batch = self._order.next(self._read_ahead)
            if batch is None:
                return
            yield from batch

    def __len__(self):
        return _C.sampler_num_samples(len(self.dataset), self.num_replicas, self.drop_last)

    @property
    def epoch(self):
        return self._order.epoch

    @epoch.setter
    def epoch(self, epoch):
        self.set_epoch(epoch)

    @property
    def num_samples(self):
        """This rank's samples per epoch (DistributedSampler's attribute)."""
        return len(self)

    @property
    def total_size(self):
        """Every rank's samples per epoch, padding included (DistributedSampler's attribute)."""
        return len(self) * self.num_replicas

    def set_epoch(self, epoch):
        """Moves to `epoch` at its start; the current epoch keeps its position."""
        self._order.set_epoch(int(epoch))

    def advance(self, n):
        """Records that n more samples of this rank were trained on."""
        self._order.advance(int(n))

    @property
    def consumed(self):
        """Samples all ranks took this epoch."""
        return self._order.consumed

    @property
    def remaining(self):
        """This rank's samples left in the epoch."""
        return self._order.remaining

    def state_dict(self):
        return self._order.position()

    def load_state_dict(self, state):
        self._order.restore(dict(state))
        if self._order.remaining == 0 and len(self.dataset) > 0:
            self._order.next_epoch()  # saved at the end of an epoch: the next one is due

    def _manual_advance(self):
        self._order.set_auto_advance(False)
        self._read_ahead = 1024


class InterruptibleSampler(InterruptibleDistributedSampler):
    """One rank: a new shuffle of the dataset every epoch (or its order), that keeps its place."""

    def __init__(self, dataset, shuffle=True, seed=0):
        super().__init__(dataset, num_replicas=1, rank=0, shuffle=shuffle, seed=seed)


class ShardedDataset(tud.Dataset):
    """A folder of sample files, one sample a file, of which each rank reads only its own shard: the
    C++ ShardedFileDataset's rule (hydro/shard_split.h): sorted names, a contiguous block of equal
    size per rank, samples_pct_per_replica of it; hidden files and subfolders are ignored. A file
    holds what torch.save wrote: a tensor, or (data, target). Files are read at __getitem__.
    Pair it with hydro.InterruptibleSampler (indices into this rank's shard). Errors name the folder."""

    def __init__(self, folder, num_replicas=None, rank=None, samples_pct_per_replica=100):
        num_replicas, rank = _world(num_replicas, rank)
        self.files = _C.sharded_files(os.fspath(folder), num_replicas, rank, float(samples_pct_per_replica))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        sample = torch.load(self.files[index])
        return tuple(sample) if isinstance(sample, (list, tuple)) else sample


def _mix(*values):
    """A 63-bit seed from the values (splitmix64 over each)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h = (h ^ (h >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
    return h & 0x7FFFFFFFFFFFFFFF


def _reseed(seed):
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed & 0xFFFFFFFF)


class _SeededDataset(tud.Dataset):
    """The user's dataset, fetched by (index, seed): in a worker process, Python's, numpy's and
    torch's generators are seeded from the sample's place in the epoch before it is loaded, so
    augmentation draws the same numbers whichever worker loads it, before or after a resume. In
    the main process (num_workers=0) the generators are the training's own, saved in checkpoints."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __getitem__(self, key):
        index, seed = key
        if tud.get_worker_info() is not None:
            _reseed(seed)
        return self.dataset[index]

    def __len__(self):
        return len(self.dataset)

    def __getattr__(self, name):
        # Not the dunders: torch's fetcher would call a dataset's own __getitems__ with our keys.
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


class _WorkerInit:
    """In each worker, whatever its start method (fork, spawn, forkserver): a SIGTERM that does not
    come from the training process is left to it (Slurm signals every process of the step; the
    training process checkpoints, then ends its workers). Then the user's worker_init_fn."""

    def __init__(self, training_pid, user):
        self.training_pid, self.user = training_pid, user

    def __call__(self, worker_id):
        _C.leave_sigterm_to_parent(self.training_pid)
        if self.user is not None:
            self.user(worker_id)


class _Batches(tud.Sampler):
    """Batches of (index, seed) from a hydro sampler, remembering the size of each batch handed out
    until the loop takes it."""

    def __init__(self, sampler, batch_size, drop_last, seed):
        self.sampler, self.batch_size, self.drop_last, self.seed = sampler, batch_size, drop_last, seed
        self.pending = collections.deque()

    def __iter__(self):
        self.pending.clear()
        s = self.sampler
        s._order.reset()
        start, world, rank, epoch = s.consumed, s.num_replicas, s.rank, s.epoch
        batch = []
        for i, index in enumerate(s._indices()):
            batch.append((index, _mix(self.seed, epoch, start + i * world + rank)))
            if len(batch) == self.batch_size:
                self.pending.append(len(batch))
                yield batch
                batch = []
        if batch and not self.drop_last:
            self.pending.append(len(batch))
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class _Counting:
    """The loader's iterator: each batch the loop takes advances the sampler by its size."""

    def __init__(self, inner, batches):
        self._inner, self._batches = inner, batches

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = next(self._inner)
        except StopIteration:
            s = self._batches.sampler
            if s.remaining:
                s.advance(s.remaining)  # what drop_last left out: the epoch is done
            raise
        self._batches.sampler.advance(self._batches.pending.popleft())
        return batch

    def __len__(self):
        return len(self._inner)


class DataLoader(tud.DataLoader):
    """torch.utils.data.DataLoader that keeps its place (as torchdata's StatefulDataLoader does).

    Tracked by hydro.Runtime, a resumed job continues at the exact next batch, with num_workers > 0
    too: batches the workers prefetched but the loop never took are not counted. Augmentation that
    draws from Python's `random`, numpy or torch inside the workers draws the same numbers after a
    resume as in a run never interrupted: each sample's generators are seeded from `seed`, the
    epoch and the sample's place in the epoch.

    Without a sampler it uses hydro.InterruptibleDistributedSampler (shuffle as given, the rank and
    world size from torch.distributed or the environment). A sampler must be a hydro sampler, and
    the dataset map-style. `seed` defaults to torch.initial_seed(); it is saved in state_dict().
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, drop_last=False,
                 generator=None, seed=None, **kwargs):
        if isinstance(dataset, tud.IterableDataset):
            raise TypeError("hydro.DataLoader keeps its place in map-style datasets only; an IterableDataset "
                            "must keep its own (use torch.utils.data.DataLoader)")
        if batch_sampler is not None:
            raise TypeError("hydro.DataLoader makes its own batches: pass batch_size and a hydro sampler, "
                            "not batch_sampler")
        if sampler is None:
            sampler = InterruptibleDistributedSampler(dataset, shuffle=bool(shuffle))
        elif not isinstance(sampler, InterruptibleDistributedSampler):
            raise TypeError(f"hydro.DataLoader keeps its place with a hydro sampler only, not a "
                            f"{type(sampler).__name__}: pass hydro.InterruptibleDistributedSampler or none")
        elif shuffle:
            raise ValueError("hydro.DataLoader: shuffle is the sampler's (sampler= and shuffle= are exclusive)")
        if batch_size is None:
            raise ValueError("hydro.DataLoader needs a batch_size")
        if kwargs.get("in_order", True) is False:
            raise ValueError("hydro.DataLoader counts the batches the loop takes in order: in_order=False is not kept")
        sampler._manual_advance()
        self._seed = int(torch.initial_seed() if seed is None else seed)
        batches = _Batches(sampler, batch_size, drop_last, self._seed)
        # The iterator draws a base seed per epoch from `generator`: a private one, so that the
        # training's generator (saved in checkpoints) is not advanced by creating an iterator.
        if generator is None:
            generator = torch.Generator()
        kwargs["worker_init_fn"] = _WorkerInit(os.getpid(), kwargs.get("worker_init_fn"))
        super().__init__(_SeededDataset(dataset), batch_sampler=batches, generator=generator, **kwargs)
        self._hydro_sampler, self._hydro_batches = sampler, batches

    @property
    def sampler(self):
        return self._hydro_sampler

    @sampler.setter
    def sampler(self, value):  # torch's __init__ assigns it
        pass

    def __iter__(self):
        return _Counting(super().__iter__(), self._hydro_batches)

    def state_dict(self):
        return {"sampler": self._hydro_sampler.state_dict(), "seed": self._seed}

    def load_state_dict(self, state):
        self._hydro_sampler.load_state_dict(state["sampler"])
        self._seed = self._hydro_batches.seed = int(state["seed"])
