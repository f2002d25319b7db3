"""The job's ranks as hydro sees them, and a torch.distributed process group over them."""
import datetime
import os

import torch.distributed as dist

from . import _C


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
