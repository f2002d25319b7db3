// Slurm's suspend grace time: the seconds between a suspend's SIGTSTP and its SIGSTOP or cgroup
// freeze, which every pause, suspend checkpoint and GPU release must fit in. Slurm 23.11 made it
// PreemptParameters=suspend_grace_time=N in slurm.conf (default 2); before 23.11 it is 2 always.
//
// slurmstepd reads it as its own slurm_conf.preempt_params holds it (src/slurmd/slurmstepd/req.c,
// _handle_suspend): the text after the first "suspend_grace_time=" (case-insensitive) to the end of
// the value must be a whole number, or Slurm logs an error and keeps 2. So
// "suspend_grace_time=6,reclaim_licenses" is 2 to Slurm, and here too: the note says why.
// The plugin reads the slurm.conf that slurmd read (SLURM_CONF, which slurmd sets for its steps),
// once per step, and hands the result to each task (HYDRO_SUSPEND_GRACE); where the file cannot be
// read, the admin's suspend_grace_time stands in, and the note says which was used.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hydro::spank {

struct SuspendGrace {
  int64_t seconds = 2;
  std::string from;  // for the logs: "slurm.conf's PreemptParameters (/etc/slurm/slurm.conf)", ...
};

inline constexpr int64_t kSlurmDefaultSuspendGrace = 2;

// The value of PreemptParameters in slurm.conf's text (the last one set, as Slurm's parser keeps),
// or none. Keys are case-insensitive; '#' starts a comment; a line may hold several Key=Value.
std::optional<std::string> preempt_parameters(const std::string& conf_text);

// Slurm's grace from a PreemptParameters value, as slurmstepd parses it: none where the value sets
// no suspend_grace_time; Slurm's default, and in `why` the reason, where Slurm ignores what is set.
std::optional<int64_t> grace_from_preempt_parameters(const std::string& params, std::string* why);

// What a step of this Slurm release (SLURM_VERSION_NUMBER's major and minor) uses: read from the
// slurm.conf at `conf_path` on 23.11 and later, 2 before. `admin` (the hydro config's
// suspend_grace_time) stands in where the file cannot be read; without it, Slurm's default.
SuspendGrace suspend_grace(int slurm_major, int slurm_minor, const std::string& conf_path,
                           std::optional<int64_t> admin);

}  // namespace hydro::spank
