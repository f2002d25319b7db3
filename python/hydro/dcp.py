"""hydro as the storage layer of torch.distributed.checkpoint (DCP), for programs that call dcp.save,
dcp.async_save and dcp.load themselves:

    dcp.save(state, storage_writer=hydro.dcp.Writer(root, step))
    dcp.load(state, storage_reader=hydro.dcp.Reader(root))

Writer: the coordinating rank stages one checkpoint of `step` in `root` and its name goes to every
rank in DCP's global plan; each rank writes its items, as DCP's FileSystemWriter lays them out (a
torch.save'd tensor or a value's bytes, one after another), into one file of its shard, rank-R/,
hashed as written, and fsyncs it; its file's name, size and hash go back with its write results;
the coordinator then writes DCP's .metadata, hydro's manifest of every file, renames the directory
into place and moves `latest` (hydro/checkpoint_dir.h), and prunes to keep_last. A rank that fails
or dies before the commit leaves `latest` on the previous checkpoint, and its staging directory is
removed. Every rank must see `root` (a shared filesystem).

Reader: DCP's own FileSystemReader over the newest checkpoint in `root` whose every file has its
manifest's size and hash; a newer one that fails is passed over (the log names it and why). With a
process group, the ranks split the check and agree. Plain
dcp.load(state, checkpoint_id=f"{root}/latest") reads the same files without the check."""
import dataclasses
import os
import pickle
import uuid

from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION, _StorageInfo
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.planner import WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

import torch

from . import _C
from .shard_file import _Counted, _own_cpu


@dataclasses.dataclass(frozen=True)
class _Target:
    """What the coordinator's global plan tells a rank: the staged checkpoint and the rank's place."""
    staging: str
    rank: int


@dataclasses.dataclass(frozen=True)
class _Written:
    """A write result's storage_data until finish(): DCP's record of the item, and with a rank's
    first item, the records (name, size, hash) of the rank's files."""
    info: _StorageInfo
    files: tuple = ()


class Writer(StorageWriter):
    """dcp.save's and dcp.async_save's storage_writer: checkpoint `step` into hydro's directory
    `root` (a checkpoint_id given to dcp.save replaces it). keep_last > 0 removes the older
    checkpoints past that many once this one is committed; keep=True never removes this one."""

    def __init__(self, root, step, keep_last=0, keep=False):
        super().__init__()
        self.root, self.step, self.keep_last, self.keep = os.fspath(root), int(step), int(keep_last), bool(keep)
        self.path = None  # the committed checkpoint's directory, on the coordinator
        self._staged = None
        self._save_id = None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.root = os.fspath(checkpoint_id)
        self._staged, self.path, self._save_id = None, None, uuid.uuid4().hex

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))

    def storage_meta(self):
        return StorageMeta(checkpoint_id=self.root, save_id=self._save_id)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        import torch.distributed as dist
        several = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if several and not kwargs.get("use_collectives", True):
            raise ValueError("hydro.dcp.Writer: dcp.save(use_collectives=False) leaves each rank to commit "
                             "alone; hydro commits one checkpoint of every rank: use the collectives")
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        self._staged = _C.StagedCheckpoint(self.root, self.step, self.keep_last)
        return [dataclasses.replace(plan, storage_data=_Target(self._staged.name, rank))
                for rank, plan in enumerate(plans)]

    def write_data(self, plan, planner):
        target = plan.storage_data
        shard = _C.ShardFiles(self.root, target.staging, self.step, target.rank)
        name = f"__{target.rank}_0.distcp"  # FileSystemWriter's name for a rank's first file
        relative = f"{shard.subdir}/{name}"
        results = []
        if plan.items:
            shard.open(name)
            out = _Counted(shard)
            for item in plan.items:
                start = out.at
                data = planner.resolve_data(item)
                if item.type == WriteItemType.BYTE_IO:
                    out.write(data.getbuffer())
                else:
                    torch.save(_own_cpu(data), out)
                info = _StorageInfo(relative, start, out.at - start)
                results.append(WriteResult(index=item.index, size_in_bytes=out.at - start, storage_data=info))
            shard.finish()
        files = tuple(shard.sync())
        if results:
            first = results[0]
            results[0] = dataclasses.replace(first, storage_data=_Written(first.storage_data, files))
        future = Future()
        future.set_result(results)
        return future

    def finish(self, metadata, results):
        storage, files = {}, []
        for rank_results in results:
            for result in rank_results:
                written = result.storage_data
                if isinstance(written, _Written):
                    files.extend(written.files)
                    written = written.info
                storage[result.index] = written
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        metadata.version = CURRENT_DCP_VERSION
        self._staged.add_files(files, len(results))
        self._staged.write_dcp_metadata(pickle.dumps(metadata))
        self.path = self._staged.commit(self.keep)
        self._staged = None


class Reader(FileSystemReader):
    """dcp.load's storage_reader: the newest checkpoint in `root` whose every file checks (hydro's
    manifest: sizes and hashes). `path` and `step` say which; FileNotFoundError if none does."""

    def __init__(self, root):
        self.root = os.fspath(root)
        self.path, self.step = self._newest_valid(self.root)
        super().__init__(self.path)

    @staticmethod
    def _newest_valid(root):
        import torch.distributed as dist
        found = None
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            found = Reader._newest_valid_together(root, dist)
        else:
            found = _C.latest_valid(root)
        if found is None:
            raise FileNotFoundError(f"hydro.dcp.Reader: no checkpoint in {root} whose every file checks")
        return found

    @staticmethod
    def _newest_valid_together(root, dist):
        """The ranks split the check: rank r of M checks the checkpoint's shards r, r + M, ... and
        the files outside them, and they take the newest checkpoint every rank passed, in rank 0's
        order (each byte read once, not once per rank)."""
        rank, world = dist.get_rank(), dist.get_world_size()
        order = [_C.resume_order(root) if rank == 0 else None]
        dist.broadcast_object_list(order, src=0)
        for name, path, step in order[0]:
            problem = _C.verify_share(root, name, rank, world)
            if problem:
                _C.log(f"hydro.dcp.Reader: passing over {path}: {problem}")
            problems = [None] * world
            dist.all_gather_object(problems, problem)
            if not any(problems):
                return path, step
        return None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None and os.fspath(checkpoint_id) != self.root:
            self.root = os.fspath(checkpoint_id)
            self.path, self.step = self._newest_valid(self.root)
        super().reset(self.path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))
