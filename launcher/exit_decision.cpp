#include <sys/wait.h>

#include "hydro/exit_codes.h"
#include "hydro/signal_map.h"
#include "supervisor.h"

namespace hydro::launcher {

ExitDecision decide_exit(int status, bool terminating, bool in_slurm_job) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return {128 + sig, false, "the program was killed by " + signal_name(sig)};
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code != kExitRequeue) return {code, false, "the program exited with status " + std::to_string(code)};
  if (terminating)
    return {code, false, "the program checkpointed after SIGTERM; Slurm is ending the job and requeues it if asked to"};
  if (!in_slurm_job) return {code, false, "the program checkpointed and asks to be run again (not in a Slurm job)"};
  return {code, true, "the program checkpointed and asks to be run again: requeueing the job"};
}

ExitDecision decide_watchdog_exit(const std::string& hang, bool terminating, bool in_slurm_job, int restart_count,
                                  int max_restarts) {
  const std::string what = "watchdog expired: " + hang + " hung and was killed; ";
  if (terminating)
    return {kExitWatchdog, false, what + "Slurm is ending the job (SIGTERM) and requeues it if asked to"};
  if (!in_slurm_job)
    return {kExitRequeue, false, what + "not in a Slurm job, so nothing to requeue (exit status " +
                                     std::to_string(kExitRequeue) + " asks to be run again)"};
  if (restart_count >= max_restarts)
    return {kExitWatchdog, false,
            what + "not requeueing: the job has been restarted " + std::to_string(restart_count) +
                " times (SLURM_RESTART_COUNT) and --max-restarts is " + std::to_string(max_restarts)};
  return {kExitRequeue, true,
          what + "requeueing the job (restart " + std::to_string(restart_count + 1) + " of --max-restarts " +
              std::to_string(max_restarts) + ")"};
}

int parse_restart_count(const char* value) {
  if (!value || !*value) return 0;
  long n = 0;
  for (const char* p = value; *p; ++p) {
    if (*p < '0' || *p > '9' || n > 1000000) return -1;
    n = n * 10 + (*p - '0');
  }
  return static_cast<int>(n);
}

}  // namespace hydro::launcher
