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

Reader: DCP's own FileSystemReader over the newest checkpoint in `root` that has DCP's .metadata
and whose every file has its manifest's size and hash; a newer one that fails is passed over (the
log names it and why). With a process group, the ranks split the check and agree. Plain
dcp.load(state, checkpoint_id=f"{root}/latest") reads the same files without the check."""
import dataclasses
import os
import pickle
import uuid

from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import filesystem
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.planner import WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from . import _C
from .shard_file import _Counted, write_value


def stamp_version(metadata):
    """The DCP format version torch writes (2.7 and later); torch 2.6's metadata has none."""
    version = getattr(filesystem, "CURRENT_DCP_VERSION", None)
    if version is not None:
        metadata.version = version


def _absolute(root):
    """A root as every rank names it: relative to the working directory, as FileSystemWriter takes
    one (hydro's directories are absolute; the error of a relative one would reach the user as
    DCP's "cannot pickle" of the exception that the coordinator's plan raised)."""
    return os.path.abspath(os.fspath(root))


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
        self.root, self.step, self.keep_last, self.keep = _absolute(root), int(step), int(keep_last), bool(keep)
        self.path = None  # the committed checkpoint's directory, on the coordinator
        self._staged = None
        self._save_id = uuid.uuid4().hex

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.root = _absolute(checkpoint_id)
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
        try:
            if plan.items:
                shard.open(name)
                out = _Counted(shard)
                for item in plan.items:
                    data = planner.resolve_data(item)
                    start, length = write_value(out, data.getbuffer() if item.type == WriteItemType.BYTE_IO else data)
                    results.append(WriteResult(index=item.index, size_in_bytes=length,
                                               storage_data=_StorageInfo(relative, start, length)))
                shard.finish()
            files = tuple(shard.sync())
        finally:
            shard.close()  # now: a failure's traceback would keep the file open
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
        stamp_version(metadata)
        self._staged.add_files(files, len(results))
        self._staged.write_dcp_metadata(pickle.dumps(metadata))
        self.path = self._staged.commit(self.keep)
        self._staged = None


class Reader(FileSystemReader):
    """dcp.load's storage_reader: the newest checkpoint in `root` that DCP can load (it has
    .metadata) and whose every file checks (hydro's manifest: sizes and hashes). `checkpoint` (a
    str) and `step` say which; FileNotFoundError if none does. With a process group, every rank
    makes its Reader at the same point: the ranks split the check and agree."""

    def __init__(self, root):
        self.root = _absolute(root)
        self.checkpoint, self.step = self._newest_valid(self.root)
        super().__init__(self.checkpoint)

    @staticmethod
    def _newest_valid(root):
        import torch.distributed as dist
        together = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        rank, world = (dist.get_rank(), dist.get_world_size()) if together else (0, 1)
        order = [None]
        if rank == 0:
            try:
                order[0] = _C.resume_order(root)
            except OSError as e:  # told to every rank, which would otherwise wait in the broadcast
                order[0] = str(e)
        if together:
            dist.broadcast_object_list(order, src=0)
        if isinstance(order[0], str):
            raise OSError(f"hydro.dcp.Reader: {order[0]}")
        for name, path, step in order[0]:
            if Reader._passes(root, name, path, rank, world, dist if together else None):
                return path, step
        raise FileNotFoundError(f"hydro.dcp.Reader: no checkpoint in {root} that DCP can load and whose every "
                                "file checks")

    @staticmethod
    def _passes(root, name, path, rank, world, dist):
        """Whether every rank passed its share of the check: rank r of M checks the checkpoint's
        shards r, r + M, ... and the files outside them."""
        problem = _C.verify_share(root, name, rank, world)
        if problem:
            _C.log(f"hydro.dcp.Reader: passing over {path}: {problem}")
        if dist is None:
            return not problem
        problems = [None] * world
        dist.all_gather_object(problems, problem)
        return not any(problems)

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None and _absolute(checkpoint_id) != self.root:
            self.root = _absolute(checkpoint_id)
            self.checkpoint, self.step = self._newest_valid(self.root)
        super().reset(self.checkpoint)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))
