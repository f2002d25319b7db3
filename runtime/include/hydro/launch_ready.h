// The handshake between hydro-launch and the program it starts: hydro-launch passes the write end
// of a pipe as HYDRO_LAUNCH_READY_FD. The Runtime writes kRuntimeUp there once its signal handlers
// are installed, and kRuntimeClosed as it closes, before they go. Until the first, hydro-launch
// holds back what would kill a program with no handler yet: the checkpoint-and-exit it sends for
// --requeue-signal and --time-limit-margin (Slurm may send `--signal` as soon as the step starts).
// After the second it sends none: the training is over, and the signal would only cut the
// program's teardown short (a finished job would end killed). A program may close one Runtime and
// start another: the last byte says where it stands.
//
// A program that starts its workers with their descriptors closed (torchrun, Python's subprocess)
// leaves them no pipe. They speak instead on hydro-launch's report socket, named in
// HYDRO_LAUNCH_SOCKET (launcher/worker_reports.h): the same bytes, each a datagram whose sender the
// kernel names (its pid and uid), with the worker's LOCAL_WORLD_SIZE after kRuntimeUp, and
// kRuntimeExiting once it has checkpointed to exit for a requeue (the launcher then reads the
// workers' end as that, whatever status their launcher ends with).
#pragma once

#include <sys/un.h>

#include <string>

namespace hydro {

inline constexpr const char* kLaunchReadyEnv = "HYDRO_LAUNCH_READY_FD";
// The pipe's inode: a descriptor number can outlive its pipe (a launcher in between that closes
// descriptors, as torchrun or Python's subprocess do) and be reused by another file.
inline constexpr const char* kLaunchReadyInoEnv = "HYDRO_LAUNCH_READY_INO";
// The Slurm job whose hydro-launch started the program (its SLURM_JOB_ID): the plugin's
// --hydro-launch does not wrap again a step of that job, which the program (a batch script) starts.
inline constexpr const char* kLaunchJobEnv = "HYDRO_LAUNCH_JOB";

// A Unix datagram socket's path, in hydro-launch's private directory: the pipe's route for a
// worker that lost it.
inline constexpr const char* kLaunchSocketEnv = "HYDRO_LAUNCH_SOCKET";
// The report socket's address at `path`, for hydro-launch's bind and the workers' sends alike; false
// when the path does not fit an address (it is never cut short).
bool launch_socket_address(const std::string& path, sockaddr_un* out);

inline constexpr char kRuntimeUp = 'r';
inline constexpr char kRuntimeClosed = 'c';
inline constexpr char kRuntimeExiting = 'x';

// Called by the Runtime once its handlers are installed: writes kRuntimeUp. The first call takes
// the pipe, or the socket when the pipe is gone: it unsets the variables (so that a child process
// does not take it too) and makes the
// descriptor close-on-exec; the process keeps it for its later Runtimes. Does nothing without the
// variable, with a bad value, or when the descriptor is not that pipe's write end any more. Never
// raises SIGPIPE; a pipe whose reader is gone is closed.
void tell_launcher_ready();
// Called by the Runtime as it closes, before its handlers go: writes kRuntimeClosed to the pipe the
// process took (nothing without one, or in a forked child).
void tell_launcher_closed();
// Called once the checkpoint before an exit for a requeue is written (or refused for want of a
// directory): kRuntimeExiting, on the report socket only (a pipe's program ends with 75 itself).
void tell_launcher_exiting();

}  // namespace hydro
