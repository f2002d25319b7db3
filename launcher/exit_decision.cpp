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

}  // namespace hydro::launcher
