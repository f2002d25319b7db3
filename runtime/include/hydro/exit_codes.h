// Exit statuses shared by the runtime, hydro-launch and the scripts.
#pragma once

namespace hydro {

// The training process committed a checkpoint and asks to be run again (sysexits' EX_TEMPFAIL).
// hydro-launch turns it into a requeue of the Slurm job when Slurm itself is not already ending it.
constexpr int kExitRequeue = 75;

}  // namespace hydro
