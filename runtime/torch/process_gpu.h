// What a pause gives back of this process's GPU (HYDRO_GPU_RELEASE, issue 33): the order and the
// fallbacks of hydro/gpu_release.h over this process's own calls: libtorch's caching allocator,
// its NCCL process groups (suspended and resumed), and the CUDA driver's process checkpoint, made
// by hydro-cuda-checkpoint (hydro/cuda_checkpoint.h) since a process cannot lock itself.
// The operator pause (operator_pause.cpp) calls it once a pause, after the device drain.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "hydro/gpu_release.h"

namespace hydro {

// At the Runtime's start (or a pause-only start's first pause): what `asked` can be here, logged
// when it is less (no CUDA device, a libtorch without CUDA, no helper), and for `full` the helper
// started, so that its driver load is not paid inside a suspend's 2 s. `hydro_allocator`
// (HYDRO_GPU_ALLOCATOR=hydro, the Runtime's start only): `full` routes libtorch's allocations to
// hydro's allocator first (cuda_memory.h), whose segments a pause moves itself (hydro/device_move.h).
void gpu_release_start(GpuRelease asked, bool cuda, bool hydro_allocator = false);
GpuRelease gpu_release_mode();

// At each step's end: the pinned host memory of hydro's move grown to the device memory its
// allocator holds, so that a pause pins nothing inside Slurm's grace time. Nothing without it.
void gpu_prepare_at_step_end();

// At a pause, once, after the drain of `devices`: releases what the mode asks. `until_freeze` is
// the time left before Slurm freezes the process (a pause by SIGTSTP), none otherwise. Returns the
// text the pause's log line ends with.
std::string gpu_release_at_pause(const std::vector<int>& devices,
                                 std::optional<std::chrono::milliseconds> until_freeze);
// At the resume, before the paused thread goes on. A device state that cannot come back ends the
// process with kExitRequeue (hydro-launch requeues it from its last checkpoint), the reason logged.
void gpu_restore_at_resume();

}  // namespace hydro
