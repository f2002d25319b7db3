"""Sharded state (DTensor: FSDP2's fully_shard, tensor parallelism) that any number of ranks resumes.

Each rank's file holds its own chunks and where each lies in its whole tensor, as DCP's save planner
(torch.distributed.checkpoint) cuts the state: plain tuples, tensors and bytes, which
torch.load(weights_only=True) reads. Nothing is gathered and nothing is communicated, at the save
or at the resume. On the checkpoint's number of ranks a rank reads its own file alone. On another,
it reads every rank's file (memory-mapped: only the bytes it needs), merges their chunk lists into
DCP's Metadata, and DCP's load planner copies into this rank's shards of the new layout the parts
of the saved chunks that overlap them.

A module's state and an optimizer's go through torch's own helpers
(torch.distributed.checkpoint.state_dict), which name the optimizer's state by parameter and set
it up before a resume fills it. An optimizer saved before its first step has no state, and is saved
as it is (the helpers would take a step to make one)."""
import io
import sys

import torch

from . import _C
from .snapshot import _is_dtensor, has_dtensor

FORMAT = "hydro.reshardable"  # the key that marks a file of this kind, and its version
VERSION = 1


def _parameters(obj):
    """A module's or an optimizer's parameters; none for another object."""
    if isinstance(obj, torch.nn.Module):
        return list(obj.parameters())
    if isinstance(obj, torch.optim.Optimizer):
        return [p for group in obj.param_groups for p in group["params"]]
    return []


def is_sharded(obj):
    """Whether obj's state holds DTensors: a module's or an optimizer's parameters are DTensors (an
    optimizer has no state before its first step), or its state_dict() holds one."""
    if not any(m in sys.modules for m in ("torch.distributed.tensor", "torch.distributed._tensor")):
        return False  # no DTensor can exist (torch 1.13 without tensor parallelism)
    if any(_is_dtensor(p) for p in _parameters(obj)):
        return True
    try:
        return has_dtensor(obj.state_dict())
    except Exception:  # noqa: BLE001 -- the save calls it again, and reports what it raises
        return False


class Sharded:
    """One tracked object of sharded state: state() to save, load(path) to resume. `modules()`
    returns the tracked modules: an optimizer's state is named by its model's parameter names."""

    def __init__(self, name, obj, modules, rank, world_size):
        self.name, self.obj, self._modules = name, obj, modules
        self.rank, self.world_size = rank, world_size

    def check(self):
        """Raises now what a save or a resume would: an optimizer whose model is not tracked."""
        if isinstance(self.obj, torch.optim.Optimizer):
            self._model()

    def _model(self):
        mine = {id(p) for p in _parameters(self.obj)}
        for module in self._modules():
            if any(id(p) in mine for p in module.parameters()):
                return module
        raise ValueError(f"hydro: track({self.name!r}): its parameters are sharded (DTensor), and hydro names an "
                         "optimizer's state by its model's parameter names: track the model too")

    def _state(self, kind=None):
        """(kind, state): "helpers" through torch's state-dict helpers, "raw" the object's state_dict()."""
        from torch.distributed.checkpoint import state_dict as helpers
        optimizer = isinstance(self.obj, torch.optim.Optimizer)
        if kind is None:
            helped = isinstance(self.obj, torch.nn.Module) or (optimizer and bool(self.obj.state))
            kind = "helpers" if helped else "raw"
        if kind == "raw":
            return kind, self.obj.state_dict()
        if optimizer:
            return kind, helpers.get_optimizer_state_dict(self._model(), self.obj)
        return kind, helpers.get_model_state_dict(self.obj)

    def _set(self, kind, state):
        from torch.distributed.checkpoint import state_dict as helpers
        if kind == "raw":
            self.obj.load_state_dict(state)
        elif isinstance(self.obj, torch.optim.Optimizer):
            helpers.set_optimizer_state_dict(self._model(), self.obj, state)
        else:
            helpers.set_model_state_dict(self.obj, state)

    def state(self):
        """This rank's part, to save."""
        return to_chunks(*self._state())

    def load(self, path):
        """Fills the object's state of this job's layout from the checkpoint's files."""
        files = rank_files(path)
        own = files[self.rank % len(files)]
        if len(files) == self.world_size:
            files = [own]
        else:
            _C.log(f"resharding {self.name}: the chunks of {len(files)} ranks onto this job's {self.world_size}")
            files = [own] + [f for f in files if f != own]  # this rank's own values first
        parts = [_read(f) for f in files]
        kind, state = self._state(parts[0]["kind"])  # the layout to fill: this job's shards
        fill(self.name, state, parts)
        self._set(kind, state)


def to_chunks(kind, state):
    """{FORMAT: VERSION, "kind": kind, "tensors": {name: {"size", "dtype", "chunks": [(offsets, sizes,
    index in data)]}}, "values": {name: index in data}, "data": [tensor or bytes]}, named and cut as
    DCP's save planner flattens the state. The tensors are this rank's shards themselves (views, not
    copies): a sync save writes them now, an async one copies them."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.planner import WriteItemType
    planner = DefaultSavePlanner()
    planner.set_up_planner(state, None, True)
    data, tensors, values = [], {}, {}
    for item in planner.create_local_plan().items:
        value = planner.resolve_data(item)
        fqn = item.index.fqn
        if item.type == WriteItemType.BYTE_IO:
            values[fqn] = len(data)
            data.append(value.getvalue())
            continue
        whole = tensors.setdefault(fqn, {"size": tuple(item.tensor_data.size),
                                         "dtype": item.tensor_data.properties.dtype, "chunks": []})
        chunk = item.tensor_data.chunk
        whole["chunks"].append((tuple(chunk.offsets), tuple(chunk.sizes), len(data)))
        data.append(value.detach())
    return {FORMAT: VERSION, "kind": kind, "tensors": tensors, "values": values, "data": data}


def _read(path):
    try:
        part = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (RuntimeError, TypeError):  # a file torch cannot map, or a torch without mmap: read whole
        part = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(part, dict) or part.get(FORMAT) != VERSION:
        raise ValueError(f"{path}: not a rank's sharded state of {FORMAT} version {VERSION}")
    return part


def rank_files(path):
    """The files of every rank for the one at `path`: rank-R/NAME.pt for each of the checkpoint's
    ranks (its manifest's world_size), or `path` alone for a checkpoint of one rank. The layout is
    the C++ checkpoint directory's (hydro/resume_choice.h)."""
    return _C.rank_files(path)


def merged(parts):
    """DCP's Metadata of the chunks of every part, each chunk once (one that several ranks saved, a
    replicated one, from the first part), whose storage_data maps a chunk to (part, index in its data)."""
    from torch.distributed.checkpoint import metadata as dcp
    meta, where = {}, {}
    for p, part in enumerate(parts):
        for fqn, i in part["values"].items():
            if fqn not in meta:
                meta[fqn] = dcp.BytesStorageMetadata()
                where[dcp.MetadataIndex(fqn)] = (p, i)
        for fqn, whole in part["tensors"].items():
            if fqn not in meta:
                meta[fqn] = dcp.TensorStorageMetadata(dcp.TensorProperties(dtype=whole["dtype"]),
                                                      torch.Size(whole["size"]), [])
            for offsets, sizes, i in whole["chunks"]:
                index = dcp.MetadataIndex(fqn, offsets)
                if index not in where:
                    meta[fqn].chunks.append(dcp.ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
                    where[index] = (p, i)
    return dcp.Metadata(state_dict_metadata=meta, storage_data=where)


def fill(name, state, parts):
    """Copies into `state` (this rank's tensors, of any layout) the overlapping parts of the saved
    chunks, as DCP's load planner reads them, and its other values. The saved names and this job's
    must be the same: a value either side lacks is an error, never skipped."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner import LoadItemType
    metadata = merged(parts)
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state, metadata, True)
    saved, here = set(metadata.state_dict_metadata), set(planner.state_dict)
    if saved != here:
        raise ValueError(f"hydro: {name}: the checkpoint's state and this job's differ: saved only "
                         f"{sorted(saved - here)[:4]}, here only {sorted(here - saved)[:4]}")
    plan = planner.finish_plan(planner.create_global_plan([planner.create_local_plan()])[0])
    for item in plan.items:
        p, i = metadata.storage_data[item.storage_index]
        stored = parts[p]["data"][i]
        if item.type == LoadItemType.BYTE_IO:
            planner.load_bytes(item, io.BytesIO(stored))
            continue
        for dim, (start, length) in enumerate(zip(item.storage_offsets, item.lengths)):
            stored = stored.narrow(dim, start, length)
        target = planner.resolve_tensor(item).detach()
        target.copy_(stored)
        planner.commit_tensor(item, target)
