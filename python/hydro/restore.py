"""A resume's load of a tracked object's file, and its device tensors back through pinned slots.

Where hydro.Runtime.resume() restores through hydro's pool (a device in this process: issue 58),
each tensor of the state that goes to a device goes there through the tracked object's slot for
it: host memory pinned once, which the object's next save reuses (snapshot.py's slots, by the same
place in the state). Where it goes: into the object's own tensor at that place where it has the
same shape and dtype (a parameter keeps its address), else a new tensor on the device it was saved
from, or for an optimizer's state saved from host copies, on its parameter's device, as the
optimizer's load_state_dict would move it. The file is mapped (torch 2.1 and later), so its bytes
are read into the slot from the page cache, and the slot's copy to the device runs on hydro's
stream. Anywhere else the file is torch.load's, as it always was."""
import inspect

import torch

from . import _C
from .snapshot import has_dtensor, host_tensor

_MMAP = {"mmap": True} if "mmap" in inspect.signature(torch.load).parameters else {}


def load_file(path):
    # hydro's own files, in a directory only this user can read: not only tensors (RNG states,
    # a scheduler's numbers), so not weights_only.
    return torch.load(path, map_location=None, weights_only=False)


def load(path, obj, slots):
    """The state in `path` for obj.load_state_dict. slots: {place: host tensor}, the object's
    snapshot's, which this fills. Every copy is done on return."""
    if not _C.restores_through_pool():
        return load_file(path)
    live = obj.state_dict()
    if has_dtensor(live):  # a DTensor's local tensor stays where torch.load puts it, by its mesh
        return load_file(path)
    places = {}

    def on_host(storage, location):
        places[_storage_id(storage)] = location
        return storage

    try:
        state = torch.load(path, map_location=on_host, weights_only=False, **_MMAP)
    except RuntimeError:  # a file torch cannot map (not hydro's own); a torn one fails here again
        places.clear()
        state = torch.load(path, map_location=on_host, weights_only=False)
    tensors = _tensors_by_place(state, (), {})
    if not all(type(t) is torch.Tensor and t.layout == torch.strided for t in tensors.values()):
        return load_file(path)  # a sparse tensor, a Parameter: as torch.load gives them
    run = _Restore(places, _tensors_by_place(live, (), {}), _optimizer_devices(obj), slots)
    try:
        with torch.no_grad():
            state = run.tree(state, ())
    except BaseException:
        try:
            _C.wait_restores()  # nothing left copying while the error unwinds the memory
        except Exception:  # noqa: BLE001: the first error is the one to report
            pass
        raise
    _C.wait_restores()
    return state


def _optimizer_devices(obj):
    """A torch optimizer's {("state", i): the device of parameter i}: its load_state_dict moves
    each parameter's state there (but its step, which stays where it was saved)."""
    if not isinstance(obj, torch.optim.Optimizer):
        return {}
    params = [p for group in obj.param_groups for p in group["params"]]
    return {("state", i): p.device for i, p in enumerate(params)}


def _storage_id(storage):
    return getattr(storage, "_untyped_storage", storage)._cdata  # a TypedStorage's (torch 2) untyped one


def _tensor_storage_id(t):
    return t.untyped_storage()._cdata if hasattr(t, "untyped_storage") else t.storage()._cdata  # torch 1.13


def _tensors_by_place(obj, place, out):
    if isinstance(obj, torch.Tensor):
        out[place] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _tensors_by_place(v, place + (k,), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _tensors_by_place(v, place + (i,), out)
    return out


class _Restore:
    def __init__(self, places, live, optimizer_devices, slots):
        self.places, self.live, self.optimizer_devices, self.slots = places, live, optimizer_devices, slots
        self.seen = {}  # the same memory twice (tied weights): one tensor, as torch.load gives

    def tree(self, obj, place):
        """obj with its tensors restored: dicts and lists in place (a module state's _metadata
        stays), tuples rebuilt."""
        if isinstance(obj, torch.Tensor):
            return self.tensor(obj, place)
        if isinstance(obj, dict):
            for k, v in obj.items():
                obj[k] = self.tree(v, place + (k,))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                obj[i] = self.tree(v, place + (i,))
        elif type(obj) is tuple:
            return tuple(self.tree(v, place + (i,)) for i, v in enumerate(obj))
        return obj

    def tensor(self, t, place):
        storage = _tensor_storage_id(t)
        key = (storage, t.storage_offset(), t.dtype, tuple(t.shape), tuple(t.stride()))
        if key not in self.seen:
            live, device = self.destination(t, place, storage)
            out = self.through_slot(t, place, live, device) if t.numel() else None
            if out is None:  # where torch.load would have put it; off the file's mapping
                out = t.to(device) if device.type != "cpu" else (t.clone() if _MMAP else t)
            self.seen[key] = out
        return self.seen[key]

    def destination(self, t, place, storage):
        """(the object's own tensor at `place` where it fits, else None; the device t goes to).
        Without one of its own: the device it was saved from (a file torch.save wrote), or for a
        torch optimizer's state saved from host copies (an async save's), its parameter's, where
        its load_state_dict would move it."""
        live = self.live.get(place)
        if live is not None and live.shape == t.shape and live.dtype == t.dtype and live.is_contiguous():
            return live, live.device
        location = self.places.get(storage)
        device = torch.device(location) if location is not None else t.device
        if device.type == "cpu" and len(place) == 3 and place[2] != "step":
            device = self.optimizer_devices.get(place[:2], device)
        return None, device

    def through_slot(self, t, place, live, device):
        dst = live if live is not None else torch.empty(t.shape, dtype=t.dtype, device=device)
        slot = self.slots.get(place)
        if slot is None or slot.shape != t.shape or slot.dtype != t.dtype:
            memory = _C.restore_buffer(dst._cdata)
            if memory is None:  # not a tensor the pool copies
                return None
            slot = host_tensor(memory, t)
        if not _C.restore_through(slot._cdata, dst._cdata, t._cdata):
            return None
        self.slots[place] = slot
        return dst
