"""hydro.Runtime: the C++ Runtime, tracking Python objects through their state_dict()."""
import atexit
import os
import random
import sys
import weakref

import torch

from . import _C, _pause, groups, restore, shard_file
from .reshard import Sharded, dcp_metadata, is_sharded
from .snapshot import Snapshot, has_dtensor


def _has_state(obj):
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _workers_leave_sigterm_to_the_training_process():
    """Slurm sends SIGTERM to every process of the step. torch's DataLoader workers die of one that
    does not come from their parent, and the loader then fails the step that would checkpoint; under
    a Runtime, workers (of any DataLoader) leave it to the training process instead."""
    from torch.utils.data._utils import signal_handling
    torch_handlers = signal_handling._set_worker_signal_handlers
    if getattr(torch_handlers, "_hydro", False):
        return

    def set_worker_signal_handlers(*args, **kwargs):
        torch_handlers(*args, **kwargs)
        _C.leave_sigterm_to_parent()

    set_worker_signal_handlers._hydro = True
    signal_handling._set_worker_signal_handlers = set_worker_signal_handlers


# Runtimes still open at exit are closed before the interpreter finalizes: a background write
# still running then would need the GIL to let go of its copies.
_live = weakref.WeakSet()


@atexit.register
def _close_live_runtimes():
    for rt in list(_live):
        rt.close()


class _PythonRNG:
    """The random generators torch's does not cover: Python's `random` and numpy's global one.
    state_dict() returns fresh objects without tensors (a `fresh` Snapshot), of plain Python types
    only (numpy's key as a list), so that torch.load(weights_only=True) reads the file."""

    def state_dict(self):
        state = {"random": random.getstate()}
        np = sys.modules.get("numpy")
        if np is not None:
            kind, key, pos, has_gauss, gauss = np.random.get_state()
            state["numpy"] = (kind, key.tolist(), int(pos), int(has_gauss), float(gauss))
        return state

    def load_state_dict(self, state):
        random.setstate(state["random"])
        if "numpy" in state:
            import numpy as np
            np.random.set_state(state["numpy"])


class Runtime:
    """Signals, pause, checkpoints and resume for one training process (see help(hydro)).

    Settings come from the environment, exactly as for C++ programs: HYDRO_CKPT_DIR,
    HYDRO_CKPT_EVERY, HYDRO_KEEP_LAST, HYDRO_CKPT_MODE, HYDRO_PAUSE, HYDRO_SIGNALS, ...
    Errors raise RuntimeError (OSError for files) with the C++ message, which names the file or
    the setting.
    """

    PYTHON_RNG = "python-rng"  # the file name of Python's and numpy's generator states

    def __init__(self):
        _pause.install()
        try:
            self._c = _C.Runtime()
        except BaseException:
            _pause.uninstall()
            raise
        _live.add(self)
        groups.on_timeout(self._watch_collectives)
        _workers_leave_sigterm_to_the_training_process()
        self._objects = {}
        self._sharded, self._sharded_names = [], []
        settings = self._c.settings
        self._rank, self._world_size = settings["rank"], settings["world_size"]
        self._rank0_writes_all = settings["mode"] == "async" and self._world_size > 1
        self._step_fence = None
        if settings["mode"] == "async" and settings["copy_behind"]:
            self._step_fence = self._fence_optimizer_steps()
        self.track(self.PYTHON_RNG, _PythonRNG())

    def track(self, name, obj, on_resume=None):
        """Saves `obj.state_dict()` in every checkpoint as NAME.pt (plain torch.save format) and
        restores it with `obj.load_state_dict()` on resume(). A module (DDP too), an optimizer, an
        LR scheduler, a GradScaler, a hydro.DataLoader or sampler, or an object of your own.
        A sharded model (FSDP2's fully_shard, any DTensor parameters) and its optimizer: each rank
        writes its own shards (in every mode; with async, tracking one before resume() makes every
        rank write and the ranks vote at each step_end), and the job resumes them on any number of
        ranks (hydro.reshard); an optimizer of sharded parameters needs its model tracked too.
        on_resume(path): called on resume() with the checkpoint's verified NAME.pt instead of
        load_state_dict() (a framework that loads its own files; `obj` then needs state_dict() only)."""
        if not (_has_state(obj) or (on_resume and callable(getattr(obj, "state_dict", None)))):
            raise TypeError(f"hydro: track({name!r}): a {type(obj).__name__} has no state_dict() and "
                            "load_state_dict(); wrap it in an object that has")
        self._warn_ddp_bucket_order(name, obj)
        sharded = None
        if on_resume is None and is_sharded(obj):
            sharded = Sharded(name, obj, self._modules, self._rank, self._world_size)
        if sharded is not None and self._rank0_writes_all:
            self._c.every_rank_writes()  # async: each rank writes its own shards, the group commits
            self._rank0_writes_all = False

        def state_dict():
            if sharded is not None:
                return sharded.state()
            state = obj.state_dict()
            if self._rank0_writes_all and has_dtensor(state):
                self._refuse_lost_shards(name)
            return state

        def write(sink):
            (shard_file.write if sharded is not None else torch.save)(state_dict(), sink)

        def read(path):
            if on_resume is not None:
                if not os.path.isfile(path):  # verify() checks the files the manifest lists only
                    raise FileNotFoundError(f"hydro: checkpoint file {path} is missing ({name!r} is tracked)")
                on_resume(path)
            elif sharded is not None:
                sharded.load(path)
            else:  # device tensors through the snapshot's pinned slots, where a device is
                obj.load_state_dict(restore.load(path, obj, snapshot.slots))

        buffers = None
        if self._step_fence is not None:  # behind: every tracked module's buffers, copied at once
            buffers = self._buffer_addresses
        snapshot = Snapshot(state_dict, fresh=isinstance(obj, _PythonRNG),
                            writer=shard_file.write if sharded is not None else None, buffers=buffers,
                            sync=self._c.settings["mode"] != "async")
        self._c.track_stream(name, write, read, snapshot.capture)
        self._objects[name] = obj
        if sharded is not None:
            self._add_sharded(sharded)
        if self._step_fence is not None and isinstance(obj, torch.optim.Optimizer):
            self._c.copy_behind()  # the tracked tensors change at its step, which waits for the copies

    def _fence_optimizer_steps(self):
        """HYDRO_ASYNC_COPY=behind: every optimizer's step (torch's global hook: any optimizer's)
        waits for the last async save's copies. None where torch has no such hook (before 2.0),
        and the state is then copied at each save."""
        import torch.optim.optimizer as optimizers
        register = getattr(optimizers, "register_optimizer_step_pre_hook", None)
        if register is None:
            _C.log(f"warning: HYDRO_ASYNC_COPY=behind needs the optimizer step hooks of torch 2.0 or later "
                   f"(this is {torch.__version__}): each save copies the state before it returns")
            return None
        me = weakref.ref(self)

        def wait_for_copies(optimizer, args, kwargs):
            rt = me()
            if rt is not None and rt._c is not None:
                rt._c.wait_copies()
        return register(wait_for_copies)

    def _add_sharded(self, sharded):
        """Its files resume on any number of ranks, and every checkpoint holds DCP's .metadata of
        every sharded object: dcp.load reads the checkpoint without hydro."""
        if not self._sharded:
            names = self._sharded_names  # not self: the C++ Runtime holds the function
            self._c.compose_dcp_metadata(lambda staging, files: dcp_metadata(staging, files, names))
            self._c.allow_reshard()
        self._sharded.append(sharded)
        self._sharded_names.append(sharded.name)

    def _buffer_addresses(self):
        out = set()
        for m in self._modules():
            for b in m.buffers():
                try:
                    if b.numel():
                        out.add(b.data_ptr())
                except RuntimeError:  # a tensor without storage of its own (a DTensor): not copied by address
                    pass
        return out

    def _modules(self):
        return [o for o in self._objects.values() if isinstance(o, torch.nn.Module)]

    @staticmethod
    def _refuse_lost_shards(name):
        """DTensors in a state that hydro does not track as sharded (not a module or optimizer of
        them). In async mode, unless a sharded object is tracked, rank 0 alone writes for every rank:
        the other ranks' shards would be lost and their resume load rank 0's."""
        raise ValueError(f"hydro: track({name!r}): its state holds DTensors, sharded across the ranks, and "
                         "HYDRO_CKPT_MODE=async saves rank 0's state alone unless a sharded model (FSDP2, "
                         "tensor parallelism) is tracked before resume(); track the model, or set "
                         "HYDRO_CKPT_MODE=sync_any or sync_all, in which every rank writes its own shards")

    def resume(self):
        """Restores every tracked object and the random generators (torch's CPU and CUDA ones,
        Python's and numpy's) from HYDRO_RESUME_FROM, else the newest valid checkpoint in
        HYDRO_CKPT_DIR. Returns the step to continue from: 0 on a fresh start."""
        for sharded in self._sharded:
            sharded.check()  # now, not at the first save (which may be SIGTERM's)
        self._c.wait_copies()  # HYDRO_ASYNC_COPY=behind: a save's copies are made before the load
        return self._c.resume()

    def step_end(self, step):
        """Call after each step with the number of steps done. Pauses here if a pause is pending
        and no operator ran; checkpoints every HYDRO_CKPT_EVERY steps. Returns False once a
        checkpoint was committed because SIGTERM came: exit with hydro.EXIT_REQUEUE."""
        return self._c.step_end(step)

    def _watch_collectives(self, timeout):
        # hydro.groups: the process groups' own timeout, which hydro watches in running time.
        if self._c is not None:
            self._c.watch_collectives(timeout.total_seconds())

    def save(self, step, keep_always=False):
        """Commits a checkpoint now (async mode: starts it) and returns its directory.
        keep_always=True (force_save): HYDRO_KEEP_LAST never removes it."""
        return self._c.save(step, keep_always)

    def wait_idle(self):
        """Waits for an async checkpoint in flight; raises if it failed."""
        self._c.wait_idle()

    def close(self):
        """Waits for background writes, leaves the ranks' store and removes the signal handlers.
        The Runtime is closed at exit anyway; close() makes it happen now."""
        if self._c is not None:
            groups.forget(self._watch_collectives)
            if getattr(self, "_step_fence", None) is not None:  # None too if __init__ failed before
                self._step_fence.remove()
            c, self._c = self._c, None
            del c
            _pause.uninstall()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def epoch(self):
        """The epoch recorded in the next checkpoint's manifest; resume() restores it."""
        return self._c.epoch

    @epoch.setter
    def epoch(self, value):
        self._c.epoch = value

    def set_epoch(self, epoch):
        self._c.epoch = epoch

    @property
    def writes_checkpoints(self):
        return self._c.writes_checkpoints

    @property
    def settings(self):
        """The settings read from the environment, as a dict."""
        return self._c.settings

    def _warn_ddp_bucket_order(self, name, obj):
        """DDP orders its gradient buckets anew after its first iteration (by when each gradient was
        ready), unless find_unused_parameters is on. A resumed run's first iteration has the first
        order, and with 3 ranks or more the sum over ranks then adds in another order: not the bits
        of a run never interrupted. Two ranks add the same either way."""
        ddp = torch.nn.parallel.DistributedDataParallel
        if isinstance(obj, ddp) and self._world_size > 2 and not obj.find_unused_parameters:
            _C.log_line("hydro", f"warning: track({name!r}): with {self._world_size} ranks, a DistributedDataParallel "
                        "built without find_unused_parameters=True resumes close to, but not bit-for-bit with, a "
                        "run never interrupted (DDP reorders its gradient buckets after its first iteration)")

    @property
    def tracked(self):
        return list(self._objects)

    def __repr__(self):
        s = self._c.settings if self._c is not None else {}
        return (f"hydro.Runtime(checkpoint_dir={s.get('checkpoint_dir')!r}, mode={s.get('mode')!r}, "
                f"rank={s.get('rank')}, world_size={s.get('world_size')}, tracked={list(self._objects)})")


def atomic_save(obj, path):
    """torch.save(obj, path), atomic and durable: written to a private temporary file beside
    `path`, fsynced, renamed over it, and the directory fsynced. `path` holds the old file or the
    whole new one, never a part; torch.load reads it. Raises OSError naming the path."""
    _C.atomic_write(str(path), lambda sink: torch.save(obj, sink))
