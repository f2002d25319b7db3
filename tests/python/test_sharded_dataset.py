# hydro.ShardedDataset: the C++ split rule over a folder of torch.save files.
import pytest
import torch

import hydro


def make(folder, n):
    folder.mkdir()
    for i in range(n):
        torch.save((torch.full((2,), float(i)), torch.tensor(i % 3)), folder / f"s{i:03d}.pt")
    (folder / ".hidden").write_text("x")
    (folder / "sub").mkdir()


def test_each_rank_reads_its_own_contiguous_block(tmp_path):
    make(tmp_path / "d", 10)
    shards = [hydro.ShardedDataset(tmp_path / "d", num_replicas=3, rank=r) for r in range(3)]
    assert [len(s) for s in shards] == [3, 3, 3]
    firsts = [int(s[0][0][0]) for s in shards]
    assert firsts == [0, 3, 6]
    x, y = shards[1][2]
    assert torch.equal(x, torch.full((2,), 5.0)) and int(y) == 2
    loader = hydro.DataLoader(shards[0], batch_size=2, sampler=hydro.InterruptibleSampler(shards[0], shuffle=False))
    assert [b[1].tolist() for b in loader] == [[0, 1], [2]]


def test_errors_name_the_folder(tmp_path):
    with pytest.raises(RuntimeError, match="cannot open folder '.*nothere'"):
        hydro.ShardedDataset(tmp_path / "nothere", num_replicas=1, rank=0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="holds no sample files"):
        hydro.ShardedDataset(tmp_path / "empty", num_replicas=1, rank=0)
