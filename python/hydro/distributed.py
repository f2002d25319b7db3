"""The job's ranks as hydro sees them, and a torch.distributed process group over them."""
import datetime
import os

import torch.distributed as dist

from . import _C


def _store_without_libuv():
    """torch 2.4 and later rendezvous through a TCPStore on libuv unless USE_LIBUV=0, and a torch
    built without libuv (Debian 13's 2.6) then fails every init_process_group with "use_libuv was
    requested but PyTorch was build without libuv support". There, USE_LIBUV=0 is set (once, at
    import, unless the user set it): torch's own older backend. A store of one rank on a port of
    the kernel's choosing, closed at once, tells which torch this is."""
    if "USE_LIBUV" in os.environ or not dist.is_available() or not hasattr(dist, "TCPStore"):
        return
    try:
        store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=5),
                              wait_for_workers=False, use_libuv=True)
    except TypeError:  # a torch before use_libuv: nothing to choose
        return
    except Exception as e:  # pylint: disable=broad-except
        # Any other failure (no loopback in a sandbox, say) is no answer: torch's default stands,
        # and import hydro goes on.
        if "libuv" in str(e):
            os.environ["USE_LIBUV"] = "0"
        return
    del store


_store_without_libuv()


def dist_env():
    """{'rank', 'world_size', 'local_rank', 'master_addr', 'master_port'}: torchrun's RANK/WORLD_SIZE/
    LOCAL_RANK when set, else the Slurm step's; MASTER_ADDR:MASTER_PORT, defaulted under a one-node
    Slurm step. hydro's checkpoint store listens at MASTER_PORT + 1. Raises ValueError naming the
    variable."""
    return _C.dist_env()


def init_process_group(backend="gloo", timeout=None, **kwargs):
    """torch.distributed.init_process_group over the ranks of dist_env() (srun -n N needs no
    torchrun). Returns the env dict; with one rank, starts nothing and returns it too."""
    env = dist_env()
    if env["world_size"] > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", env["master_addr"])
        os.environ.setdefault("MASTER_PORT", str(env["master_port"]))
        if timeout is not None and not isinstance(timeout, datetime.timedelta):
            timeout = datetime.timedelta(seconds=timeout)
        extra = {"timeout": timeout} if timeout is not None else {}
        dist.init_process_group(backend, rank=env["rank"], world_size=env["world_size"], **extra, **kwargs)
    return env


# torch's variables for the ranks, and dist_env()'s key for each.
_TORCH_VARS = {"RANK": "rank", "WORLD_SIZE": "world_size", "LOCAL_RANK": "local_rank", "MASTER_ADDR": "master_addr",
               "MASTER_PORT": "master_port"}


def export_env():
    """Sets torch's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT from dist_env() where
    they are unset, so that a framework reading them (the Hugging Face Trainer, through accelerate)
    runs the Slurm step's tasks (srun -n N) as its ranks, with no torchrun. Call it before the
    framework reads them (before TrainingArguments). Under torchrun they are set already and kept.
    Returns dist_env()."""
    env = dist_env()
    if env["world_size"] > 1:
        for var, key in _TORCH_VARS.items():
            os.environ.setdefault(var, str(env[key]))
    return env
