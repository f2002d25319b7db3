// Preemption with GraceTime: Slurm sends SIGTERM at the start of the grace time and requeues the
// job only if it is still running when the grace time ends. A job that checkpoints and exits
// early would end as FAILED, not requeued. So after the program has checkpointed on SIGTERM,
// hydro-launch asks Slurm whether the job is being preempted (scontrol show job: PreemptTime is
// set) and then requeues it itself, at once: the preemptor starts sooner, and the job resumes
// when it ends.
#pragma once

#include <string>

namespace hydro::launcher {

// From `scontrol show job` output: the PreemptTime value when it is set, else "".
std::string preempt_time(const std::string& scontrol_output);

// Runs `scontrol show job JOB`; "" when the job is not being preempted or scontrol fails.
std::string job_preempt_time(const std::string& scontrol, const std::string& job_id);

}  // namespace hydro::launcher
