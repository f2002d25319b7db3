# hydro's samplers against torch.utils.data.DistributedSampler, and their positions.
import itertools

import pytest
import torch
from torch.utils.data import DistributedSampler

import hydro


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


GRID = list(itertools.product([0, 1, 7, 64, 101], [1, 2, 3, 8], [0, 5], [0, 3], [True, False], [True, False]))


@pytest.mark.parametrize("n,world,seed,epoch,shuffle,drop_last", GRID)
def test_order_is_distributed_samplers(n, world, seed, epoch, shuffle, drop_last):
    for rank in range(world):
        ref = DistributedSampler(Sized(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last)
        ours = hydro.InterruptibleDistributedSampler(Sized(n), num_replicas=world, rank=rank, shuffle=shuffle,
                                                     seed=seed, drop_last=drop_last)
        ref.set_epoch(epoch)
        ours.set_epoch(epoch)
        assert list(ours) == list(ref)
        assert len(ours) == len(ref)
        assert isinstance(ours, torch.utils.data.Sampler)


def test_every_epoch_is_a_new_shuffle_without_set_epoch():
    s = hydro.InterruptibleSampler(Sized(50), seed=1)
    first, second = list(s), list(s)
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != second and s.epoch == 1


def test_resumes_mid_epoch_at_the_next_sample():
    s = hydro.InterruptibleDistributedSampler(Sized(100), num_replicas=2, rank=1, seed=3)
    s.set_epoch(4)
    whole = list(s)
    s2 = hydro.InterruptibleDistributedSampler(Sized(100), num_replicas=2, rank=1, seed=3)
    s2.set_epoch(4)
    it = iter(s2)
    taken = [next(it) for _ in range(13)]  # num_workers=0: handed out == taken
    state = s2.state_dict()
    assert state["epoch"] == 4 and state["consumed"] == 26
    s3 = hydro.InterruptibleDistributedSampler(Sized(100), num_replicas=2, rank=1, seed=3)
    s3.load_state_dict(state)
    assert taken + list(s3) == whole


def test_advance_is_cycling_utils_api():
    s = hydro.InterruptibleSampler(Sized(10), shuffle=False)
    s.advance(4)
    assert list(s) == [4, 5, 6, 7, 8, 9] and s.remaining == 0
    with pytest.raises(RuntimeError, match="past the end of epoch"):
        s.advance(1)


def test_state_saved_at_an_epochs_end_resumes_at_the_next_epoch():
    s = hydro.InterruptibleSampler(Sized(10), seed=2)
    list(s)
    state = s.state_dict()
    s2 = hydro.InterruptibleSampler(Sized(10), seed=2)
    s2.load_state_dict(state)
    assert s2.epoch == 1
    ref = hydro.InterruptibleSampler(Sized(10), seed=2)
    ref.set_epoch(1)
    assert list(s2) == list(ref)


@pytest.mark.parametrize("key,value,message", [
    ("seed", 9, "seed 9 differs from this sampler's 0"),
    ("size", 11, "dataset size 11 differs"),
    ("shuffle", False, "shuffle false differs"),
])
def test_a_different_sampler_is_refused_by_name(key, value, message):
    s = hydro.InterruptibleSampler(Sized(10))
    state = s.state_dict()
    state[key] = value
    with pytest.raises(RuntimeError, match=message):
        hydro.InterruptibleSampler(Sized(10)).load_state_dict(state)


def test_state_of_another_kind_is_refused():
    with pytest.raises(KeyError, match="sampler state has no 'epoch'"):
        hydro.InterruptibleSampler(Sized(10)).load_state_dict({"x": 1})


def test_rank_and_world_come_from_the_environment(env):
    env.setenv("RANK", "2")
    env.setenv("WORLD_SIZE", "4")
    env.setenv("MASTER_ADDR", "127.0.0.1")
    s = hydro.InterruptibleDistributedSampler(Sized(40), shuffle=False)
    assert (s.rank, s.num_replicas) == (2, 4)
    assert list(s)[:3] == [2, 6, 10]
