// Exit statuses shared by the runtime, hydro-launch and the scripts.
#pragma once

namespace hydro {

// The training process committed a checkpoint and asks to be run again (sysexits' EX_TEMPFAIL).
// hydro-launch turns it into a requeue of the Slurm job when Slurm itself is not already ending it.
constexpr int kExitRequeue = 75;

// hydro-launch decided to requeue the job and could not itself (no `scontrol` in a container, or
// one that cannot reach slurmctld): the host does it, once. hydro's SPANK plugin requeues the job
// when a task of a job with hydro on exits with it; slurm.conf's `RequeueExit=85` does the same for
// a batch script that exits with it. Above kExitRequeue, so that srun, which exits with its tasks'
// highest status, passes it on to the batch script when its other tasks exit kExitRequeue.
constexpr int kExitRequeueJob = 85;

// hydro-launch's watchdog killed the hung program and did not requeue the job (it has been
// restarted --max-restarts times already). timeout(1) exits with the same status.
constexpr int kExitWatchdog = 124;

}  // namespace hydro
