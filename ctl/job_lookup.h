// What hydroctl asks Slurm about a job: its owner, through `scontrol show job` (core only, no
// libslurm). The owner check is hydroctl's own, before Slurm's: a clear refusal for another
// user's job, whatever scancel would say.
#pragma once

#include <string>
#include <vector>
#include <sys/types.h>

#include "hydro/status.h"

namespace hydro::ctl {

struct JobOwner {
  std::string user;
  uid_t uid = 0;
};

// Parses scontrol's "UserId=alice(1001)".
Status parse_job_owner(const std::string& scontrol_output, const std::string& job, JobOwner* out);

// Runs `scontrol show job JOB` and parses it.
Status job_owner(const std::string& scontrol, const std::string& job, JobOwner* out);

}  // namespace hydro::ctl
