"""hydro: PyTorch training that Slurm can suspend, requeue, preempt and time-limit at no cost.

    import hydro
    rt = hydro.Runtime()                 # settings from the environment (HYDRO_*), as in C++
    rt.track("model", model)             # anything with state_dict()/load_state_dict()
    rt.track("optimizer", opt)
    rt.track("loader", loader)           # a hydro.DataLoader: resumes at the next batch
    step = rt.resume()                   # 0 on a fresh start
    for epoch in range(loader.sampler.epoch, epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            ...one step...
            step += 1
            if not rt.step_end(step):    # checkpointed after SIGTERM: run me again
                sys.exit(hydro.EXIT_REQUEUE)

The work is done by the C++ runtime (hydro._C) that C++ programs use: the operator-boundary
pause, the checkpoint-directory protocol, the ranks' vote, the sampler order.
"""
import torch  # first: hydro._C links the libtorch this torch has loaded

from ._build import TORCH_VERSION as _BUILT_FOR

if torch.__version__ != _BUILT_FOR:
    # Loading _C under another libtorch could fail on a missing symbol or, worse, load and crash.
    raise ImportError(
        f"hydro was built for torch {_BUILT_FOR} but this interpreter has torch {torch.__version__} "
        f"(from {torch.__file__}): reinstall hydro in this environment (pip install hydro's checkout) "
        f"or use the torch it was built for")

from . import _C
from ._C import EXIT_REQUEUE, EXIT_WATCHDOG, __version__
from .data import DataLoader, InterruptibleDistributedSampler, InterruptibleSampler, ShardedDataset
from . import watchdog
from .distributed import dist_env, export_env, init_process_group
from . import groups
from .job import Job, JobContext, JobRunner
from .runtime import Runtime, atomic_save

__all__ = [
    "Runtime", "atomic_save", "DataLoader", "InterruptibleSampler", "InterruptibleDistributedSampler", "ShardedDataset",
    "dist_env", "export_env", "init_process_group", "watchdog", "Job", "JobContext", "JobRunner", "EXIT_REQUEUE", "EXIT_WATCHDOG",
    "__version__", "groups",
]
groups.install()  # with HYDRO_PAUSE on: process groups that survive a hold of any length
