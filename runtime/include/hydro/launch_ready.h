// The handshake between hydro-launch and the program it starts: hydro-launch passes the write end
// of a pipe as HYDRO_LAUNCH_READY_FD; the Runtime writes one byte there once its signal handlers
// are installed. Until then hydro-launch holds back what would kill a program with no handler yet:
// the checkpoint-and-exit it sends for --requeue-signal and --time-limit-margin (Slurm may send
// `--signal` as soon as the step starts).
#pragma once

namespace hydro {

inline constexpr const char* kLaunchReadyEnv = "HYDRO_LAUNCH_READY_FD";

// Called by the Runtime: writes the byte, closes the descriptor, unsets the variable (so that a
// child process does not repeat it). Does nothing without the variable or with a bad value.
void tell_launcher_ready();

}  // namespace hydro
