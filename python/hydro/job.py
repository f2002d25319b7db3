"""A training job in epochs, run by hydro's C++ JobRunner (caffe2's JobRunner and CheckpointManager):
it resumes from the newest checkpoint, runs `init` on a fresh start only, runs epochs until a stop
condition holds, checkpoints at every epoch's end, and returns hydro.EXIT_REQUEUE when SIGTERM made
a step checkpoint mid-epoch. The semantics are hydro/job.h's, exactly.

    rt = hydro.Runtime(); rt.track("model", model); rt.track("optimizer", opt)
    job = hydro.Job()
    job.init = lambda ctx: torch.manual_seed(1234)           # fresh start only
    def epoch(e, ctx):
        for i in range(ctx.epoch_step, steps_per_epoch):     # resumes mid-epoch
            ctx.metrics.add("loss", train_step(e, i))
            if not ctx.step_end(i + 1):
                return                                       # checkpointed: stop
    job.epoch = epoch
    job.exit = lambda ctx: save_final_model()               # once, at the end
    job.epoch_limiter(10).stop_when(lambda ctx: ctx.history and ctx.history[-1]["metrics"]["loss"]["mean"] < 0.01)
    sys.exit(hydro.JobRunner(rt).run(job))                   # 0, or hydro.EXIT_REQUEUE

Draw what an epoch needs at its top from tracked state (a hydro sampler) or a generator seeded by
the epoch, never the global RNG: a restart mid-epoch calls `epoch` again for it. Progress lines
every HYDRO_PROGRESS_EVERY seconds (rank 0), JSON lines to HYDRO_METRICS_FILE."""
import torch.distributed as dist

from . import _C
from ._C import Job, JobContext

__all__ = ["Job", "JobContext", "JobRunner"]


def _gather(text):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, text)
    return out


class JobRunner:
    """Runs a hydro.Job over a hydro.Runtime (one JobRunner per Runtime: it tracks "hydro_job").
    With torch.distributed initialized over several ranks, each epoch's metrics are reduced across
    the ranks (reduce_across_ranks=False keeps each rank's own)."""

    def __init__(self, runtime, reduce_across_ranks=None):
        self._runtime = runtime
        self._c = _C.JobRunner(runtime._c)
        if reduce_across_ranks is None:
            reduce_across_ranks = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if reduce_across_ranks:
            self._c.reduce_metrics_with(_gather)

    def run(self, job):
        """Runs `job` to its end: 0 once `exit` ran, hydro.EXIT_REQUEUE after a SIGTERM checkpoint."""
        if self._runtime._c is None:
            raise RuntimeError("hydro: JobRunner.run(): its Runtime is closed")
        return self._c.run(job)

    @property
    def history(self):
        """Every finished epoch: {"epoch", "step", "metrics": {name: {"sum", "count", "min", "max", "mean"}}}."""
        return self._c.history
