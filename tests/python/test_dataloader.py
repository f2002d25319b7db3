# hydro.DataLoader: the exact next batch after a resume, with workers that prefetch and augment.
import random
import subprocess

import numpy as np
import pytest
import torch

import hydro


class Augmenting(torch.utils.data.Dataset):
    """Each sample draws from Python's random, numpy and torch: as augmentation does."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.tensor([float(i), random.random(), float(np.random.rand()), float(torch.rand(()))])


def loader(workers, **kw):
    return hydro.DataLoader(Augmenting(), batch_size=4, shuffle=True, num_workers=workers, seed=7, **kw)


def seed_all(seed):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def epoch_batches(dl, epoch, stop=None):
    dl.sampler.set_epoch(epoch)
    out = []
    for b in dl:
        out.append(b)
        if stop is not None and len(out) == stop:
            break
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_resumes_at_the_exact_next_batch_with_the_same_augmentation(workers):
    seed_all(0)
    whole = epoch_batches(loader(workers), 1)
    seed_all(0)
    first = loader(workers)
    head = epoch_batches(first, 1, stop=3)  # the workers have prefetched more than 3 batches
    state = first.state_dict()
    assert state["sampler"]["consumed"] == 12
    rng = torch.get_rng_state(), random.getstate(), np.random.get_state()
    second = loader(workers)
    second.load_state_dict(state)
    torch.set_rng_state(rng[0]); random.setstate(rng[1]); np.random.set_state(rng[2])
    tail = list(second)
    assert len(head) + len(tail) == len(whole) == 10
    for a, b in zip(head + tail, whole):
        assert torch.equal(a, b)


def test_workers_draw_differently_per_sample_and_per_epoch():
    dl = loader(2)
    e0, e1 = torch.cat(epoch_batches(dl, 0)), torch.cat(epoch_batches(dl, 1))
    assert len(set(e0[:, 1].tolist())) == 40  # every sample its own stream
    assert not torch.equal(e0[e0[:, 0].argsort()], e1[e1[:, 0].argsort()])


def test_a_finished_epoch_resumes_at_the_next_one():
    dl = loader(0)
    epoch_batches(dl, 0)
    dl2 = loader(0)
    dl2.load_state_dict(dl.state_dict())
    assert dl2.sampler.epoch == 1


def test_drop_last_ends_the_epoch():
    dl = hydro.DataLoader(Augmenting(), batch_size=6, drop_last=True)
    assert len(dl) == 6 and len(list(dl)) == 6
    assert dl.sampler.remaining == 0


def test_creating_an_iterator_leaves_the_training_generator_alone():
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    iter(loader(0))
    assert torch.equal(torch.rand(3), expected)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="hydro sampler only, not a SequentialSampler"):
        hydro.DataLoader(Augmenting(), sampler=torch.utils.data.SequentialSampler(range(40)))
    with pytest.raises(TypeError, match="not batch_sampler"):
        hydro.DataLoader(Augmenting(), batch_sampler=[[0, 1]])

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(TypeError, match="map-style datasets only"):
        hydro.DataLoader(Stream())


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_leave_a_stray_sigterm_to_the_training_process(context):
    """Slurm signals every process of the step: a worker of any start method survives a SIGTERM
    that its training process did not send, and the epoch completes."""
    dl = hydro.DataLoader(Augmenting(), batch_size=4, num_workers=2, multiprocessing_context=context)
    it = iter(dl)
    got = [next(it), next(it)]  # batches go round-robin: both workers are up
    for w in it._inner._workers:
        subprocess.run(["kill", "-TERM", str(w.pid)], check=True)  # from another process, as slurmstepd
    got += list(it)
    assert len(got) == 10
