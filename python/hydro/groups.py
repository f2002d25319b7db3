"""Process groups that survive a hold of any length.

torch's process groups measure their timeouts in wall-clock time, which keeps running while Slurm
holds a job (scontrol suspend, suspend preemption, gang scheduling) or hydro pauses it: a rank
waiting in a collective for a peer that was held longer than the timeout fails when resumed.

With HYDRO_PAUSE on, `import hydro` wraps torch.distributed.init_process_group, new_group and
split_group, also where a module imported before hydro holds torch's own (DeviceMesh, which FSDP2
imports, takes them at its import), and a hydro.Runtime takes over their timeouts: the groups get
HOLD_PROOF as torch's timeout, and the timeout the script asked for (or torch's default) goes to
the Runtime's hang watch instead, which counts running time only (hydro/hang_watch.h). Groups
created before the Runtime are switched when it starts (torch 2; on torch 1.13, create the Runtime
first). Without a Runtime (the zero-lines pause alone), the groups keep torch's timeouts: nothing
would catch a hang in their place.
For NCCL, the heartbeat monitor (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) gets HOLD_PROOF too, unless the
script set it: the monitor would otherwise end a process held longer than 10 minutes.
"""
import datetime
import functools
import inspect
import os
import sys
import warnings

import torch.distributed as dist

from . import _C

# Longer than any hold (hydro::kHoldProof, hydro/hang_watch.h).
HOLD_PROOF = datetime.timedelta(seconds=_C.HOLD_PROOF_SECONDS)

_timeouts = []     # the timeouts the script asked for, one per group created
_unproofed = []    # groups created with the asked timeout, before a Runtime watched (None: default)
_watchers = []     # the live Runtimes' watch_collectives
_installed = []    # (module, name, original)


def collective_timeout():
    """The smallest timeout asked for by the groups created so far (a timedelta), or None."""
    return min(_timeouts) if _timeouts else None


def on_timeout(watcher):
    """A Runtime takes over: the groups made so far become hold-proof, and watcher(timeout) is
    called now if a group exists, and again whenever a new group asks for less."""
    _watchers.append(watcher)
    _make_hold_proof()
    if _timeouts:
        watcher(collective_timeout())


def forget(watcher):
    """on_timeout's watcher no more (its Runtime closed)."""
    if watcher in _watchers:
        _watchers.remove(watcher)


def _make_hold_proof():
    set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    while _unproofed:
        group = _unproofed.pop()
        if set_timeout is None:
            _C.log_line("hydro", "warning: this torch cannot change a process group's timeout once made: "
                        "a group made before hydro.Runtime keeps its own, and a hold longer than it "
                        "fails; create the Runtime first")
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch 2 calls _set_pg_timeout deprecated
            set_timeout(HOLD_PROOF, group)


def _asked(timeout, backend):
    if timeout is not None:
        return timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=timeout)
    nccl = backend is not None and "nccl" in str(backend).lower()
    default = getattr(dist.distributed_c10d, "default_pg_nccl_timeout", None) if nccl else None
    return default or dist.distributed_c10d.default_pg_timeout


def _backend_of(arguments):
    """The backend a group is made for: named, or (split_group) its parent's."""
    if arguments.get("backend") is not None or "parent_pg" not in arguments:
        return arguments.get("backend")
    try:
        return dist.get_backend(arguments.get("parent_pg"))
    except (RuntimeError, ValueError):
        return None


def _hold_proof(create, returns_group):
    signature = inspect.signature(create)

    @functools.wraps(create)
    def created(*args, **kwargs):
        call = signature.bind(*args, **kwargs)  # a TypeError here is the caller's, as torch's
        asked = _asked(call.arguments.get("timeout"), _backend_of(call.arguments))
        watched = bool(_watchers)
        if watched:
            call.arguments["timeout"] = HOLD_PROOF
        os.environ.setdefault("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", str(int(HOLD_PROOF.total_seconds())))
        group = create(*call.args, **call.kwargs)
        member = group if returns_group else None
        _track(member)
        if not returns_group or isinstance(group, dist.ProcessGroup):  # not a NON_GROUP_MEMBER
            if not watched:
                _unproofed.append(member)
            smaller = not _timeouts or asked < min(_timeouts)
            _timeouts.append(asked)
            for w in _watchers if smaller else ():
                w(asked)
        return group
    return created


def _track(group):
    """Tells the runtime the group's name (None: the default group), so that HYDRO_GPU_RELEASE=full
    can suspend its NCCL communicators around the move. torch 1.13's groups have no name."""
    try:
        name = (group or dist.group.WORLD).group_name
    except (AttributeError, RuntimeError, ValueError):
        return
    _C.track_process_group(name)


def install():
    """Wraps init_process_group and new_group when HYDRO_PAUSE is on (once)."""
    if _installed or not _C.pause_enabled():
        return
    for name, returns_group in (("init_process_group", False), ("new_group", True), ("split_group", True)):
        original = getattr(dist.distributed_c10d, name, None)
        if original is None:  # torch 1.13 has no split_group
            continue
        wrapped = _hold_proof(original, returns_group)
        for module in _holders(name, original):
            setattr(module, name, wrapped)
            _installed.append((module, name, original))


def _holders(name, original):
    """torch.distributed, its distributed_c10d, and every torch module already imported that took
    torch's own `name` at its import (torch.distributed.device_mesh does)."""
    for module_name, module in list(sys.modules.items()):
        if module is not None and module_name.startswith("torch") and getattr(module, name, None) is original:
            yield module


def uninstall():
    """The originals back (for tests)."""
    while _installed:
        module, name, original = _installed.pop()
        setattr(module, name, original)
    _timeouts.clear()
    _unproofed.clear()
    _watchers.clear()
