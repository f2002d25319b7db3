"""Async checkpoints of Python objects: what the training thread does before it goes on.

The state's tensors are copied into CPU buffers allocated once per tensor and reused from one
checkpoint to the next (fresh memory is slow to touch), and the structure is pickled by
torch.serialization's own `_save`, handed a stand-in for its zip writer that keeps every record.
hydro._C then writes those records into the checkpoint on the background thread, without the GIL,
through libtorch's zip writer: the file is what torch.save would have written, and plain
torch.load reads it. Anything that path cannot take (a torch without `_save`, a tensor the copy
cannot hold) is serialized into memory by torch.save on the training thread instead."""
import collections
import ctypes
import inspect
import io
import pickle
import struct
import sys

import torch

from . import _C

_SAVE = getattr(torch.serialization, "_save", None)
_SAVE_KW = {}
if _SAVE is not None and "_disable_byteorder_record" in inspect.signature(_SAVE).parameters:
    _SAVE_KW["_disable_byteorder_record"] = False


class _Records:
    """Stands in for torch's PyTorchFileWriter inside `_save`: keeps each record to write later. A
    storage is kept by address only when it is one of the snapshot's own copies (`owned`: their
    addresses), which nothing changes or frees until the write is done; any other storage (a tensor
    the copy did not reach, inside an object of the user's) is copied now."""

    def __init__(self, owned):
        self.records, self.owned = [], owned

    def write_record(self, name, data, size):
        if hasattr(data, "data_ptr"):  # a storage (torch 2.x)
            data = data.data_ptr()
        if isinstance(data, int):  # a storage's address (torch 1.x)
            if data in self.owned:
                self.records.append((name, data, size))
            else:
                self.records.append((name, ctypes.string_at(data, size)))
        elif isinstance(data, (bytes, bytearray)):
            self.records.append((name, bytes(data)))
        elif isinstance(data, str):
            self.records.append((name, data.encode()))
        else:
            raise TypeError(f"hydro: unexpected record {name!r} of type {type(data).__name__}")


def _records_without_tensors():
    """The records this torch's `_save` writes for an object without tensors, in its order: data.pkl
    and whatever this version adds (byteorder, .format_version, ...); None without `_save`."""
    if _SAVE is None:
        return None
    zf = _Records(set())
    try:
        _SAVE({}, zf, pickle, torch.serialization.DEFAULT_PROTOCOL, **_SAVE_KW)
    except (TypeError, RuntimeError, AttributeError):
        return None  # a `_save` unlike those known: fresh states take the general path
    return zf.records


_TENSORLESS = _records_without_tensors()


def _plain_records(state):
    """The records torch.save writes for a state without tensors, with its pickle made by C's
    pickle, which writes what torch's pickler would (there is no storage to name) without torch's
    Python persistent_id call for every object."""
    data = pickle.dumps(state, protocol=torch.serialization.DEFAULT_PROTOCOL)
    return [(r[0], data) if r[0] == "data.pkl" else r for r in _TENSORLESS]


def _is_dtensor(obj):
    """Whether obj is a torch.distributed DTensor; none can exist before its module is imported."""
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        module = sys.modules.get(name)
        dtensor = getattr(module, "DTensor", None)
        if dtensor is not None and isinstance(obj, dtensor):
            return True
    return False


def has_dtensor(state):
    """Whether a state (its dicts, lists and tuples) holds a DTensor: a rank's shard of a sharded one."""
    if isinstance(state, dict):
        return any(has_dtensor(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return any(has_dtensor(v) for v in state)
    return _is_dtensor(state)


def host_tensor(memory, like):
    """hydro._C's host memory for a copy of `like` (a HostBuffer) as a tensor of its dtype and shape."""
    return torch.frombuffer(memory, dtype=like.dtype).view(like.shape)


def _host_slot(t):
    """A CPU tensor for t's reused copy. For a device tensor (hydro._C says which), hydro's host
    memory, pinned where it fits, which its copy reaches on a stream of hydro's (the save's capture
    waits for it)."""
    if t.numel():
        memory = _C.checkpoint_buffer(t._cdata)
        if memory is not None:
            return host_tensor(memory, t)
    return torch.empty(t.shape, dtype=t.dtype)


_EXACT = (int, bool, str, bytes, type(None))
_OTHER = object()  # in a shape: a value _leaf cannot vouch for (see Snapshot._records)


def _leaf(v):
    """A plain value as it decides the pickle: its type and value (1, 1.0 and True pickle
    differently), a float by its bits (0.0 == -0.0; NaNs differ in sign and payload). Anything else
    is _OTHER: a state holding it is pickled at every capture."""
    if type(v) in _EXACT:
        return (type(v), v)
    if type(v) is float:
        return (float, struct.pack("<d", v))
    return _OTHER


class Snapshot:
    """The reused CPU copies of one tracked object's tensors, and its capture().

    fresh=True: state_dict() returns new objects that nothing changes afterwards and that hold no
    tensor (the random generators' states), so capture() pickles them as they are, without walking
    them for tensors to copy: Python's generator state alone is a tuple of 625 ints.
    writer=write(state, sink): the file is not torch.save's but what `write` makes of the state
    (hydro.shard_file's, of hydro.reshard.to_chunks' dict, whose tensors are all in its "data");
    the background thread calls it on the copies, with the GIL.
    buffers=f(): the addresses of a module's buffers, copied at once, never queued: a forward
    changes them (BatchNorm's statistics), and HYDRO_ASYNC_COPY=behind waits for queued copies at
    the next optimizer step only.
    sync=True: a sync save's capture (on a machine with a GPU: the device tensors' copies staged in
    pinned memory, hydro/staging.h). Where this path cannot take the state, capture() returns
    ("write",): the item's own torch.save, streamed, not a copy of it in memory."""

    def __init__(self, state_dict, fresh=False, writer=None, buffers=None, sync=False):
        self._state_dict = state_dict
        self._buffers, self._now = buffers, ()
        self._fresh = fresh
        self._writer = writer
        self._sync = sync
        self.slots = {}  # {place in the state: host tensor}; a resume fills them too (restore.py)
        self._last = (None, None)  # the last pickled shape (see _tree) and its records
        self._warned = False

    def _copy(self, path, t, seen):
        # `path`: the keys and indices from the state's root, a tuple ("a/b" and "a", "b" differ).
        # The same memory twice (tied weights): one copy, as torch.save keeps one storage.
        key = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()), str(t.device)) if t.numel() else path
        if key in seen:
            return seen[key].detach()  # another tensor over the same storage, as the state had
        slot = self.slots.get(path)
        if slot is None or slot.shape != t.shape or slot.dtype != t.dtype:
            slot = self.slots[path] = _host_slot(t)
        # Inside rt.save() a large host copy is queued: a helper thread shares it while this
        # thread pickles, and save() returns once it is done (the C++ side holds both memories).
        if t.numel() and t.data_ptr() in self._now:
            slot.copy_(t)
        else:
            _C.copy_for_checkpoint(slot._cdata, t._cdata)
        seen[key] = slot
        return slot

    def _tree(self, obj, path, seen, shape):
        """The copy of `obj`: its tensors copied into slots, its dicts, lists and tuples rebuilt. Appends
        to `shape` what its pickle depends on: equal shapes pickle to equal bytes."""
        if _is_dtensor(obj):
            return self._dtensor(obj, path, seen, shape)
        if isinstance(obj, torch.Tensor):
            slot = self._copy(path, obj, seen)
            shape.append((path, slot.data_ptr(), slot.dtype, slot.shape))
            return slot
        if isinstance(obj, dict):
            out = collections.OrderedDict() if isinstance(obj, collections.OrderedDict) else {}
            shape.append((type(out), len(obj)))
            for k, v in obj.items():
                shape.append(_leaf(k))
                out[k] = self._tree(v, path + (k,), seen, shape)
            if hasattr(obj, "_metadata"):  # a module's state_dict: versions for load_state_dict
                out._metadata = obj._metadata
                shape.append(repr(obj._metadata))  # torch's plain dicts of versions: exact
            return out
        if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
            shape.append((type(obj), len(obj)))
            return type(obj)(self._tree(v, path + (i,), seen, shape) for i, v in enumerate(obj))
        shape.append(_leaf(obj))
        return obj

    def _dtensor(self, t, path, seen, shape):
        """A DTensor (a sharded model's parameter, FSDP2's, or its optimizer's state): this rank's
        shard alone is copied, into a slot, and a DTensor of the same layout is made around the
        copy, with no communication. Its pickle, like torch.save's of the original, holds the shard
        and the layout, never the whole tensor."""
        if t.device_mesh.device_type != "cpu":
            # from_local would move the copy back to the mesh's device on this thread, and the
            # pickle would then hold bytes of its own: torch.save's path, correct and slower.
            raise TypeError(f"a DTensor on a {t.device_mesh.device_type} mesh")
        local = self._copy(path, t.to_local(), seen)
        shape.append((path, "dtensor", local.data_ptr(), local.dtype, local.shape, tuple(t.shape), tuple(t.stride()),
                      repr(t.placements), repr(t.device_mesh)))
        return type(t).from_local(local, t.device_mesh, t.placements, run_check=False, shape=t.shape,
                                  stride=t.stride())

    def _chunks(self, chunks):
        """hydro.reshard.to_chunks' dict, its tensors (all in "data", plain ones) copied: the rest
        holds plain values only, which nothing changes once made."""
        seen = {}
        data = [self._copy(("data", i), v, seen) if isinstance(v, torch.Tensor) else v
                for i, v in enumerate(chunks["data"])]
        return {**chunks, "data": data}

    def _records(self, copies, shape):
        """The records torch's `_save` writes for `copies`. The same as the last capture's when
        `shape` is: the same structure, plain values and slots (pickling is most of the time a
        small state takes here)."""
        if shape == self._last[0]:
            return self._last[1]
        zf = _Records({t.data_ptr() for t in self.slots.values()})
        _SAVE(copies, zf, pickle, torch.serialization.DEFAULT_PROTOCOL, **_SAVE_KW)
        self._last = (shape, zf.records) if _OTHER not in shape else (None, None)
        return zf.records

    def capture(self):
        state = self._state_dict()
        try:
            self._now = self._buffers() if self._buffers is not None else ()
            if _SAVE is None:
                raise TypeError("this torch has no torch.serialization._save")
            if self._fresh and _TENSORLESS is not None:
                return ("zip", _plain_records(state), state)
            if self._writer is not None:
                with torch.no_grad():
                    copies = self._chunks(state)
                return ("stream", lambda sink: self._writer(copies, sink))
            shape = []
            with torch.no_grad():
                copies = self._tree(state, (), {}, shape)
            return ("zip", self._records(copies, shape), copies)
        except (TypeError, RuntimeError, AttributeError) as e:
            if self._sync:
                return ("write",)  # torch's own path, streamed: a copy in memory would gain nothing
            if not self._warned:
                _C.log(f"warning: async checkpoint: serializing on the training thread ({e})")
                self._warned = True
            buf = io.BytesIO()
            (self._writer or torch.save)(state, buf)
            return ("bytes", buf.getvalue())
