// hydro-launch's requeue of its own job (`scontrol requeue $SLURM_JOB_ID`). A hang or a failure
// may be seen by several tasks at once: every rank's step timer runs out together when one rank
// hangs and the others wait for it in a collective. Each such task asks for the requeue; the first
// wins and the others find the job already requeued, which is no error.
#pragma once

#include <string>

namespace hydro::launcher {

enum class Requeue { done, done_already, failed };

// From `scontrol show job` output and this run's SLURM_RESTART_COUNT: whether the job has been
// requeued since this run started (Restarts= above the count, or a pending or requeued state).
bool requeued_since(const std::string& scontrol_output, int restart_count);

// Runs `scontrol requeue JOB`; when it fails, asks `scontrol show job JOB` whether another task
// (or Slurm) requeued it first. *rc: scontrol's exit status.
Requeue requeue_job(const std::string& scontrol, const std::string& job_id, int restart_count, int* rc);

}  // namespace hydro::launcher
