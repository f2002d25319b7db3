// The handshake between hydro-launch and the program it starts: hydro-launch passes the write end
// of a pipe as HYDRO_LAUNCH_READY_FD; the Runtime writes one byte there once its signal handlers
// are installed. Until then hydro-launch holds back what would kill a program with no handler yet:
// the checkpoint-and-exit it sends for --requeue-signal and --time-limit-margin (Slurm may send
// `--signal` as soon as the step starts).
#pragma once

namespace hydro {

inline constexpr const char* kLaunchReadyEnv = "HYDRO_LAUNCH_READY_FD";
// The pipe's inode: a descriptor number can outlive its pipe (a launcher in between that closes
// descriptors, as torchrun or Python's subprocess do) and be reused by another file.
inline constexpr const char* kLaunchReadyInoEnv = "HYDRO_LAUNCH_READY_INO";

// Called by the Runtime: writes the byte, closes the descriptor, unsets the variables (so that a
// child process does not repeat it). Does nothing without the variable, with a bad value, or when
// the descriptor is not that pipe's write end any more. Never raises SIGPIPE.
void tell_launcher_ready();

}  // namespace hydro
