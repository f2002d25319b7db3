"""Sharded state (DTensor: FSDP2's fully_shard, tensor parallelism) that any number of ranks resumes,
and that torch.distributed.checkpoint (DCP) loads.

Each rank's file holds its own chunks, as DCP's save planner cuts the state {tracked name: state},
and an index of where each lies in its whole tensor (hydro.shard_file: DCP's own data layout).
Nothing is gathered and nothing is communicated, at the save or at the resume. The committing rank
merges every rank's index into DCP's .metadata at the checkpoint's top, so that dcp.load(state,
checkpoint_id=<the checkpoint's directory>) reads it without hydro. On the checkpoint's number of
ranks a rank reads its own file alone. On another, it reads every rank's index, merges them into
DCP's Metadata, and DCP's load planner copies into this rank's shards of the new layout the parts
of the saved chunks that overlap them (only those are read).

A module's state and an optimizer's go through torch's own helpers
(torch.distributed.checkpoint.state_dict), which name the optimizer's state by parameter and set
it up before a resume fills it. An optimizer saved before its first step has no state, and is saved
as it is (the helpers would take a step to make one)."""
import contextlib
import io
import pickle
import re
import sys

import torch

from . import _C, shard_file
from .snapshot import _is_dtensor, has_dtensor


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
        self._plan = {}  # to_chunks' cache

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
        """This rank's part, to save (shard_file.write writes it)."""
        return to_chunks(self.name, *self._state(), cache=self._plan)

    def load(self, path):
        """Fills the object's state of this job's layout from the checkpoint's files."""
        files = rank_files(path)
        own = files[self.rank % len(files)]
        if len(files) == self.world_size:
            files = [own]
        else:
            _C.log(f"resharding {self.name}: the chunks of {len(files)} ranks onto this job's {self.world_size}")
            files = [own] + [f for f in files if f != own]  # this rank's own values first
        with contextlib.ExitStack() as opened:
            parts = [opened.enter_context(_Part(f, self.name)) for f in files]
            kind, state = self._state(parts[0].kind)  # the layout to fill: this job's shards
            fill(self.name, state, parts)
        self._set(kind, state)


def _layout(flat):
    """What of DCP's flattened state decides the parts of its local plan that to_chunks reads (each
    item's fqn, type, whole size, dtype and chunk): per entry its fqn and, for a DTensor, its dtype,
    whole shape, placements and mesh (which fix this rank's chunk), for a tensor its dtype and
    shape. None where an entry is of another kind of tensor (its items are DCP's to make)."""
    from torch.distributed.tensor import DTensor
    out = []
    for fqn, obj in flat.items():
        if type(obj) is DTensor:
            out.append((fqn, obj.dtype, obj.shape, obj.placements, obj.device_mesh))
        elif type(obj) in (torch.Tensor, torch.nn.Parameter):
            out.append((fqn, obj.dtype, obj.shape))
        elif isinstance(obj, torch.Tensor) or hasattr(obj, "__create_write_items__"):
            return None
        else:
            out.append((fqn,))
    return tuple(out)


def to_chunks(name, kind, state, cache=None):
    """{"kind": kind, "tensors": {fqn: {"size", "dtype", "chunks": [(offsets, sizes, index in data)]}},
    "values": {fqn: index in data}, "data": [tensor or bytes], "mappings": DCP's planner_data}, named
    and cut as DCP's save planner flattens {name: state}. The tensors are this rank's shards
    themselves (views, not copies): a sync save writes them now, an async one copies them.
    `cache` (a dict kept from call to call): DCP's local plan is made again only when the state's
    _layout changed (making it is most of the time an async save stalls the training for)."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.planner import WriteItemType
    planner = DefaultSavePlanner()
    planner.set_up_planner({name: state}, None, True)
    layout = _layout(planner.state_dict) if cache is not None else None
    if layout is not None and cache.get("layout") == layout:
        plan = cache["plan"]
    else:
        plan = planner.create_local_plan()
        if layout is not None:
            cache.update(layout=layout, plan=plan)
    data, tensors, values = [], {}, {}
    pickled = cache.setdefault("pickled", {}) if cache is not None else None
    for item in plan.items:
        fqn = item.index.fqn
        if item.type == WriteItemType.BYTE_IO:
            values[fqn] = len(data)
            data.append(_pickled(planner, item, pickled))
            continue
        value = planner.resolve_data(item)
        whole = tensors.setdefault(fqn, {"size": tuple(item.tensor_data.size),
                                         "dtype": item.tensor_data.properties.dtype, "chunks": []})
        chunk = item.tensor_data.chunk
        whole["chunks"].append((tuple(chunk.offsets), tuple(chunk.sizes), len(data)))
        data.append(value.detach())
    # The flattening's own mappings, made anew: a cached plan's are another call's (equal where the
    # layout is, but a layout of equal names can nest differently).
    mappings = planner.mappings if planner.flatten_state_dict else plan.planner_data
    return {"kind": kind, "tensors": tensors, "values": values, "data": data, "mappings": mappings}


_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _plain(value):
    """A value whose repr() tells it apart from any other (an optimizer's hyperparameters)."""
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return type(value) in _PLAIN


def _pickled(planner, item, cache):
    """A non-tensor value as DCP's planner writes it (torch.save). `cache` (a dict kept from call to
    call, or None) holds the bytes of plain values by fqn and repr: they seldom change, and pickling
    a dozen of them each save was a third of an async save's stall."""
    value = planner.lookup_object(item.index)  # what resolve_data() looks up, then transforms
    if cache is None or not _plain(value):
        return planner.transform_object(item, value).getvalue()
    key = (item.index.fqn, repr(value))
    if key not in cache:
        if len(cache) > 4096:  # values that keep changing (a schedule's lr): keep it bounded
            cache.clear()
        cache[key] = planner.transform_object(item, value).getvalue()
    return cache[key]


class _Part:
    """One rank's file: its index, and its values read where they lie (a context manager: the file
    stays open while a resume fills the state). Reads hydro's first format too, one torch.save of
    the index with its values, named without the tracked name."""

    def __init__(self, path, name):
        self.path = path
        self._file = open(path, "rb")
        try:
            index = shard_file.read_index(self._file, path)
            self._values = None
            if index is None:
                index = _read_first_format(path, name)
                self._values = index["data"]
        except BaseException:
            self._file.close()
            raise
        self.kind, self.tensors, self.values = index["kind"], index["tensors"], index["values"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def tensor(self, ref):
        return self._values[ref] if self._values is not None else shard_file.read_tensor(self._file, ref, self.path)

    def read_into(self, ref, target):
        """Reads a whole chunk into `target`, as it lies in the file; False where it cannot."""
        return self._values is None and shard_file.read_into(self._file, ref, target)

    def bytes(self, ref):
        return self._values[ref] if self._values is not None else shard_file.read_bytes(self._file, ref, self.path)


def _read_first_format(path, name):
    """A file of hydro's first sharded format (one torch.save: the index, its values in "data" and
    fqns without the tracked name), as the index of the current one."""
    try:
        try:
            part = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except (RuntimeError, TypeError):  # a file torch cannot map: read whole
            part = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- whatever torch.load raises, the file is not ours
        raise ValueError(f"{path}: not a rank's sharded state of {shard_file.FORMAT}: no index at its end, "
                         f"and not hydro's first format ({e})") from e
    if not isinstance(part, dict) or part.get(shard_file.FORMAT) != 1:
        raise ValueError(f"{path}: not a rank's sharded state of {shard_file.FORMAT}")
    named = lambda d: {f"{name}.{fqn}": v for fqn, v in d.items()}  # noqa: E731 -- DCP's flattening of {name: state}
    return {"kind": part["kind"], "tensors": named(part["tensors"]), "values": named(part["values"]),
            "data": part["data"]}


def rank_files(path):
    """The files of every rank for the one at `path`: rank-R/NAME.pt for each of the checkpoint's
    ranks (its manifest's world_size), or `path` alone for a checkpoint of one rank. The layout is
    the C++ checkpoint directory's (hydro/resume_choice.h)."""
    return _C.rank_files(path)


def merged(parts):
    """DCP's Metadata of the chunks of every part (each with .tensors and .values, as an index has
    them), each chunk once (one that several ranks saved, a replicated one, from the first part),
    whose storage_data maps a chunk to (part, where in it, its sizes: None for a value)."""
    from torch.distributed.checkpoint import metadata as dcp
    meta, where = {}, {}
    for p, part in enumerate(parts):
        for fqn, ref in part.values.items():
            if fqn not in meta:
                meta[fqn] = dcp.BytesStorageMetadata()
                where[dcp.MetadataIndex(fqn)] = (p, ref, None)
        for fqn, whole in part.tensors.items():
            if fqn not in meta:
                meta[fqn] = dcp.TensorStorageMetadata(dcp.TensorProperties(dtype=whole["dtype"]),
                                                      torch.Size(whole["size"]), [])
            for offsets, sizes, ref in whole["chunks"]:
                index = dcp.MetadataIndex(fqn, torch.Size(offsets))
                if index not in where:
                    meta[fqn].chunks.append(dcp.ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
                    where[index] = (p, ref, tuple(sizes))
    return dcp.Metadata(state_dict_metadata=meta, storage_data=where)


def fill(name, state, parts):
    """Copies into `state` (this rank's tensors, of any layout) the overlapping parts of the saved
    chunks, as DCP's load planner reads them, and its other values. The saved names and this job's
    must be the same: a value either side lacks is an error, never skipped."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.planner import LoadItemType
    metadata = merged(parts)
    planner = DefaultLoadPlanner()
    planner.set_up_planner({name: state}, metadata, True)
    saved, here = set(metadata.state_dict_metadata), set(planner.state_dict)
    saved -= _options_of_an_older_torch(name, saved - here, metadata, parts)
    for fqn in _options_of_a_newer_torch(name, here - saved, planner.state_dict):
        del planner.state_dict[fqn]  # this job's value stays
        here.discard(fqn)
    if saved != here:
        raise ValueError(f"hydro: {name}: the checkpoint's state and this job's differ: saved only "
                         f"{sorted(saved - here)[:4]}, here only {sorted(here - saved)[:4]}")
    plan = planner.finish_plan(planner.create_global_plan([planner.create_local_plan()])[0])
    for item in plan.items:
        p, ref, sizes = metadata.storage_data[item.storage_index]
        if item.type == LoadItemType.BYTE_IO:
            planner.load_bytes(item, io.BytesIO(parts[p].bytes(ref)))
            continue
        target = planner.resolve_tensor(item).detach()
        whole = not any(item.storage_offsets) and tuple(item.lengths) == sizes
        dtype = metadata.state_dict_metadata[item.storage_index.fqn].properties.dtype
        if not (whole and target.dtype == dtype and parts[p].read_into(ref, target)):
            stored = parts[p].tensor(ref)
            for dim, (start, length) in enumerate(zip(item.storage_offsets, item.lengths)):
                stored = stored.narrow(dim, start, length)
            target.copy_(stored)
        planner.commit_tensor(item, target)


# An optimizer's option (param_groups' hyperparameters) that one torch has and another lacks: a
# checkpoint resumed under an upgraded or downgraded torch (Adam's decoupled_weight_decay, added in
# torch 2.8, say). torch's own Optimizer.load_state_dict takes the same line.
_OPTION = re.compile(r"\.param_groups\.\d+\.[^.]+$")


def _options_of_a_newer_torch(name, here_only, state):
    """The options this job's optimizer has and the checkpoint lacks (its torch predates them): they
    keep this job's values, the optimizer's defaults."""
    newer = [fqn for fqn in here_only if _OPTION.search(fqn) and not torch.is_tensor(state[fqn])]
    if newer:
        _C.log_line("hydro", f"{name}: the checkpoint has no {sorted(newer)[:4]} (an older torch's "
                    "optimizer): this optimizer's own values stay")
    return newer


def _options_of_an_older_torch(name, saved_only, metadata, parts):
    """The options the checkpoint has and this torch's optimizer lacks: passed over, as torch's own
    load_state_dict leaves a key the optimizer never reads (AdamW saved by torch 2.8 or later has
    decoupled_weight_decay=True; torch 2.6's AdamW is decoupled without it). The log names each
    with its value."""
    from torch.distributed.checkpoint import metadata as dcp
    older = {}
    for fqn in sorted(saved_only):
        if _OPTION.search(fqn) and isinstance(metadata.state_dict_metadata[fqn], dcp.BytesStorageMetadata):
            p, ref, _ = metadata.storage_data[dcp.MetadataIndex(fqn)]
            older[fqn] = torch.load(io.BytesIO(parts[p].bytes(ref)), weights_only=True)
    if older:
        _C.log_line("hydro", f"{name}: this torch's optimizer has no option {older}, which the checkpoint "
                    "has (a newer torch's): passed over")
    return set(older)


class _Index:
    """A rank's index read for the .metadata: the file's place in the checkpoint, and its chunks."""

    def __init__(self, staging, relative):
        self.relative = relative
        path = f"{staging}/{relative}"
        with open(path, "rb") as f:
            index = shard_file.read_index(f, path)
        if index is None:
            raise ValueError(f"{path}: not a {shard_file.FORMAT} file of version {shard_file.VERSION}")
        self.tensors, self.values, self.mappings = index["tensors"], index["values"], index["mappings"]


def _rank_of(relative):
    match = re.match(r"rank-(\d+)/", relative)
    return int(match.group(1)) if match else 0


def dcp_metadata(staging, files, names):
    """The pickle of DCP's .metadata for the checkpoint being committed in `staging`: every rank's
    chunks of every tracked sharded object (`names`), each at its place in the rank's file
    (`files`: the checkpoint's, as its manifest names them), exactly as DCP's FileSystemWriter
    records its own files."""
    from torch.distributed.checkpoint import filesystem

    from .dcp import stamp_version

    indexes = [_Index(staging, f) for name in names
               for f in sorted((f for f in files if f.rsplit("/", 1)[-1] == f"{name}.pt"), key=_rank_of)]
    metadata = merged(indexes)
    metadata.storage_data = {i: filesystem._StorageInfo(indexes[p].relative, *span)
                             for i, (p, span, _) in metadata.storage_data.items()}
    metadata.planner_data = {fqn: path for index in indexes for fqn, path in index.mappings.items()}
    stamp_version(metadata)
    return pickle.dumps(metadata)
