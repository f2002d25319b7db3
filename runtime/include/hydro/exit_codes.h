// Exit statuses shared by the runtime, hydro-launch and the scripts.
#pragma once

namespace hydro {

// The training process committed a checkpoint and asks to be run again (sysexits' EX_TEMPFAIL).
// hydro-launch turns it into a requeue of the Slurm job when Slurm itself is not already ending it.
constexpr int kExitRequeue = 75;

// hydro-launch's watchdog killed the hung program and did not requeue the job (it has been
// restarted --max-restarts times already). timeout(1) exits with the same status.
constexpr int kExitWatchdog = 124;

}  // namespace hydro
