"""Sharded state (DTensor: FSDP2's fully_shard, tensor parallelism) that any number of ranks resumes.

Each rank's file holds its own shards and where they lie in the whole tensors, as DCP's planner
describes them (torch.distributed.checkpoint: a Metadata of chunks, one item per chunk). Nothing is
gathered and nothing is communicated, at the save or at the resume. A resume reads every rank's
file of the checkpoint (memory-mapped: only the bytes a rank needs are read), merges their chunk
lists, and lets DCP's load planner copy into this rank's shards of the new layout whatever parts of
the saved chunks overlap them: the same number of ranks or another.

A module's state and an optimizer's go through torch's own helpers
(torch.distributed.checkpoint.state_dict): the optimizer's state is named by parameter, and is
set up before a resume fills it, as its own state_dict() would be empty before the first step."""
import io
import json
import os
import re

import torch

from .snapshot import _is_dtensor, has_dtensor

FORMAT = "hydro.reshardable"  # the key that marks a file of this kind, and its version
VERSION = 1


def is_sharded(obj):
    """Whether obj's state holds DTensors: a module's or an optimizer's parameters are DTensors (an
    optimizer has no state before its first step), or its state_dict() holds one."""
    if isinstance(obj, torch.nn.Module):
        params = list(obj.parameters())
    elif isinstance(obj, torch.optim.Optimizer):
        params = [p for group in obj.param_groups for p in group["params"]]
    else:
        params = []
    if any(_is_dtensor(p) for p in params):
        return True
    try:
        return has_dtensor(obj.state_dict())
    except Exception:  # noqa: BLE001 -- the save calls it again, and reports what it raises
        return False


class Sharded:
    """One tracked object of sharded state: state() to save, load(path) to resume.
    `modules()` returns the tracked modules: an optimizer's state is named by its model's
    parameter names, so its model must be tracked too."""

    def __init__(self, name, obj, modules):
        self.name, self.obj, self._modules = name, obj, modules

    def _model(self):
        mine = {id(p) for group in self.obj.param_groups for p in group["params"]}
        for module in self._modules():
            if any(id(p) in mine for p in module.parameters()):
                return module
        raise ValueError(f"hydro: track({self.name!r}): its parameters are sharded (DTensor), and hydro names an "
                         "optimizer's state by its model's parameter names: track the model too")

    def _state(self):
        from torch.distributed.checkpoint import state_dict as helpers
        if isinstance(self.obj, torch.nn.Module):
            return helpers.get_model_state_dict(self.obj)
        if isinstance(self.obj, torch.optim.Optimizer):
            return helpers.get_optimizer_state_dict(self._model(), self.obj)
        return self.obj.state_dict()

    def _set(self, state):
        from torch.distributed.checkpoint import state_dict as helpers
        if isinstance(self.obj, torch.nn.Module):
            helpers.set_model_state_dict(self.obj, state)
        elif isinstance(self.obj, torch.optim.Optimizer):
            helpers.set_optimizer_state_dict(self._model(), self.obj, state)
        else:
            self.obj.load_state_dict(state)

    def state(self):
        """This rank's part, to save: DCP's description of its chunks and their data."""
        return to_chunks(self._state())

    def load(self, path):
        """Fills the object's state of this job's layout from every rank's file of the checkpoint."""
        state = self._state()  # the layout to fill: this job's shards (the optimizer's set up)
        fill(state, [_read(p) for p in rank_files(path)])
        self._set(state)


def to_chunks(state):
    """{FORMAT: VERSION, "metadata": DCP's Metadata of this rank's chunks, whose storage_data maps each
    chunk to its index in "data", "data": [tensor or bytes]}. The tensors are this rank's shards
    themselves (views, not copies): a sync save writes them now, an async one copies them."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    planner = DefaultSavePlanner()
    planner.set_up_planner(state, None, True)
    plans, metadata = planner.create_global_plan([planner.create_local_plan()])
    data, where = [], {}
    for item in planner.finish_plan(plans[0]).items:
        value = planner.resolve_data(item)
        where[item.index] = len(data)
        data.append(value.getvalue() if isinstance(value, io.BytesIO) else value.detach())
    metadata.storage_data = where
    return {FORMAT: VERSION, "metadata": metadata, "data": data}


def _read(path):
    try:
        part = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except RuntimeError:  # a file torch cannot map (not a zip of aligned records): read whole
        part = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(part, dict) or part.get(FORMAT) != VERSION:
        raise ValueError(f"{path}: not a rank's sharded state of {FORMAT} version {VERSION}")
    return part


def rank_files(path):
    """The files of every rank for the one at `path`: rank-R/NAME.pt for each of the checkpoint's
    ranks (its manifest's world_size), or `path` alone for a checkpoint of one rank."""
    shard_dir, name = os.path.split(path)
    step_dir = os.path.dirname(shard_dir)
    if not re.fullmatch(r"rank-\d+", os.path.basename(shard_dir)):
        return [path]
    with open(os.path.join(step_dir, "manifest.json")) as f:
        ranks = json.load(f)["world_size"]
    return [os.path.join(step_dir, f"rank-{r}", name) for r in range(ranks)]


def merged(parts):
    """One Metadata for the chunks of every part, each chunk once (a replicated one, which every rank
    saved, from the first rank), whose storage_data maps a chunk to (part, index in its data)."""
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, TensorStorageMetadata
    tensors, where = {}, {}
    for p, part in enumerate(parts):
        md = part["metadata"]
        for fqn, meta in md.state_dict_metadata.items():
            if not isinstance(meta, TensorStorageMetadata):
                tensors.setdefault(fqn, meta)
                where.setdefault(MetadataIndex(fqn), (p, md.storage_data[MetadataIndex(fqn)]))
                continue
            whole = tensors.setdefault(fqn, TensorStorageMetadata(meta.properties, meta.size, []))
            for chunk in meta.chunks:
                index = MetadataIndex(fqn, chunk.offsets)
                if index not in where:
                    whole.chunks.append(chunk)
                    where[index] = (p, md.storage_data[index])
    return Metadata(state_dict_metadata=tensors, storage_data=where)


def fill(state, parts):
    """Copies into `state` (this rank's tensors, of any layout) the overlapping parts of the saved
    chunks, as DCP's load planner reads them, and its other values."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner import LoadItemType
    metadata = merged(parts)
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state, metadata, True)
    plan = planner.finish_plan(planner.create_global_plan([planner.create_local_plan()])[0])
    for item in plan.items:
        p, i = metadata.storage_data[item.storage_index]
        saved = parts[p]["data"][i]
        if item.type == LoadItemType.BYTE_IO:
            planner.load_bytes(item, io.BytesIO(saved))
            continue
        for dim, (start, length) in enumerate(zip(item.storage_offsets, item.lengths)):
            saved = saved.narrow(dim, start, length)
        target = planner.resolve_tensor(item).detach()
        target.copy_(saved)
        planner.commit_tensor(item, target)
