# hydro.atomic_save: torch.save made atomic and durable, under injected failures.
import os
import subprocess

import pytest
import torch

import hydro


def test_round_trip_is_plain_torch_load(tmp_path):
    p = tmp_path / "x.pt"
    obj = {"w": torch.arange(10.0), "n": 3}
    hydro.atomic_save(obj, p)
    back = torch.load(p)
    assert torch.equal(back["w"], obj["w"]) and back["n"] == 3
    assert os.listdir(tmp_path) == ["x.pt"]


class Exploding:
    def __reduce__(self):
        raise RuntimeError("boom in pickling")


def test_a_failure_mid_save_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    p = tmp_path / "x.pt"
    hydro.atomic_save({"v": torch.ones(1000)}, p)
    before = p.read_bytes()
    with pytest.raises(OSError, match="boom in pickling"):
        hydro.atomic_save({"v": torch.zeros(1000), "bad": Exploding()}, p)
    assert p.read_bytes() == before
    assert os.listdir(tmp_path) == ["x.pt"]


def test_a_missing_directory_is_named(tmp_path):
    p = tmp_path / "no" / "x.pt"
    with pytest.raises(OSError, match=str(tmp_path / "no")):
        hydro.atomic_save(torch.ones(1), p)


def test_a_full_disk_is_an_error_naming_the_file_and_keeps_the_old_one(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)], check=True)  # root, as CI
    try:
        p = mnt / "x.pt"
        hydro.atomic_save(torch.ones(1000), p)
        before = p.read_bytes()
        with pytest.raises(OSError, match="No space left on device"):
            hydro.atomic_save(torch.ones(1 << 20), p)  # 4 MiB
        assert p.read_bytes() == before
        assert os.listdir(mnt) == ["x.pt"]
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
