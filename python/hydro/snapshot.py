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


class Snapshot:
    """The reused CPU copies of one tracked object's tensors, and its capture().

    fresh=True: state_dict() returns new objects that nothing changes afterwards and that hold no
    tensor (the random generators' states), so capture() pickles them as they are, without walking
    them for tensors to copy: Python's generator state alone is a tuple of 625 ints."""

    def __init__(self, state_dict, fresh=False):
        self._state_dict = state_dict
        self._fresh = fresh
        self._slots = {}
        self._warned = False

    def _copy(self, path, t, seen):
        # The same memory twice (tied weights): one copy, as torch.save keeps one storage.
        key = (t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()), str(t.device)) if t.numel() else path
        if key in seen:
            return seen[key].detach()  # another tensor over the same storage, as the state had
        slot = self._slots.get(path)
        if slot is None or slot.shape != t.shape or slot.dtype != t.dtype:
            slot = self._slots[path] = torch.empty(t.shape, dtype=t.dtype)
        slot.copy_(t)
        seen[key] = slot
        return slot

    def _tree(self, obj, path, seen):
        if isinstance(obj, torch.Tensor):
            return self._copy(path, obj, seen)
        if isinstance(obj, dict):
            out = collections.OrderedDict() if isinstance(obj, collections.OrderedDict) else {}
            for k, v in obj.items():
                out[k] = self._tree(v, f"{path}/{k}", seen)
            if hasattr(obj, "_metadata"):  # a module's state_dict: versions for load_state_dict
                out._metadata = obj._metadata
            return out
        if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
            return type(obj)(self._tree(v, f"{path}/{i}", seen) for i, v in enumerate(obj))
        return obj

    def capture(self):
        state = self._state_dict()
        try:
            if _SAVE is None:
                raise TypeError("this torch has no torch.serialization._save")
            if self._fresh and _TENSORLESS is not None:
                return ("zip", _plain_records(state), state)
            with torch.no_grad():
                copies = self._tree(state, "", {})
            zf = _Records({t.data_ptr() for t in self._slots.values()})
            _SAVE(copies, zf, pickle, torch.serialization.DEFAULT_PROTOCOL, **_SAVE_KW)
            return ("zip", zf.records, copies)
        except (TypeError, RuntimeError, AttributeError) as e:
            if not self._warned:
                _C.log(f"warning: async checkpoint: serializing on the training thread ({e})")
                self._warned = True
            buf = io.BytesIO()
            torch.save(state, buf)
            return ("bytes", buf.getvalue())
