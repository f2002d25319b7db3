"""Process groups that survive a hold of any length.

torch's process groups measure their timeouts in wall-clock time, which keeps running while Slurm
holds a job (scontrol suspend, suspend preemption, gang scheduling) or hydro pauses it: a rank
waiting in a collective for a peer that was held longer than the timeout fails when resumed.

With HYDRO_PAUSE on, `import hydro` wraps torch.distributed.init_process_group, new_group and
split_group, also where a module imported before hydro holds torch's own (DeviceMesh, which FSDP2
imports, takes them at its import), and a hydro.Runtime takes over their timeouts: the groups get
HOLD_PROOF as torch's timeout, and the timeout the script asked for (or torch's default) goes to
the Runtime's hang watch instead, which counts running time only (hydro/hang_watch.h). Groups
created before the Runtime are switched when it starts. Without a Runtime (the zero-lines pause
alone), the groups keep torch's timeouts: nothing would catch a hang in their place. Where a torch
cannot switch a group once made (late_switch_reaches: torch 1.13; a Gloo group before torch 2.9),
the group is made hold-proof at once, and a hang in it is caught only once a Runtime starts.
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


def late_switch_reaches(backend):
    """Whether a group of `backend` (None: torch's default, Gloo on the CPU) made now takes
    HOLD_PROOF when a Runtime starts later. torch 1.13 has no _set_pg_timeout. Before torch 2.9
    (pytorch#158128, ProcessGroupGloo.set_timeout), _set_pg_timeout leaves a Gloo group's contexts
    with the timeout they were made with (torch 2.6: "Timed out waiting 3000ms for recv")."""
    if getattr(dist.distributed_c10d, "_set_pg_timeout", None) is None:
        return False
    name = str(backend).lower() if backend is not None else "gloo"
    gloo = "gloo" in name or "nccl" not in name
    return not gloo or hasattr(getattr(dist, "ProcessGroupGloo", None), "set_timeout")


def _make_hold_proof():
    while _unproofed:
        group = _unproofed.pop()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch 2 calls _set_pg_timeout deprecated
            dist.distributed_c10d._set_pg_timeout(HOLD_PROOF, group)


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
        backend = _backend_of(call.arguments)
        asked = _asked(call.arguments.get("timeout"), backend)
        proof_now = bool(_watchers) or not late_switch_reaches(backend)
        if proof_now:
            call.arguments["timeout"] = HOLD_PROOF
        if not _watchers and proof_now:
            _C.log_line("hydro", f"this torch cannot lengthen a {backend or 'gloo'} group's timeout once made: it "
                        f"is made hold-proof now, and its timeout of {asked.total_seconds():g} s is watched "
                        "once a hydro.Runtime starts (until then a hang in it is not caught)")
        os.environ.setdefault("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", str(int(HOLD_PROOF.total_seconds())))
        group = create(*call.args, **call.kwargs)
        member = group if returns_group else None
        _track(member)
        if not returns_group or isinstance(group, dist.ProcessGroup):  # not a NON_GROUP_MEMBER
            if not proof_now:
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
