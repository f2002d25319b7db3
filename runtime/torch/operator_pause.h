// The pause at operators and the signal handlers that drive it (operator_pause.cpp); the Runtime
// (runtime.cpp) starts and stops them. hydro/runtime.h declares the public queries
// (operator_pause_armed, drains_cuda_on_pause, releases_cuda_cache_on_pause, start_pause_only).
#pragma once

#include <string>
#include <vector>

#include "hydro/settings.h"
#include "hydro/signal_map.h"

namespace hydro {

// Settings::from_env(), throwing std::runtime_error (it names the variable) on a bad one.
Settings settings_from_env();

// Installs the handlers for `signals` and sets the operator callback up for `settings`, replacing
// the handlers of an earlier pause-only start. `pause_only` (start_pause_only(): no Runtime) asks
// about CUDA at the first pause instead of now. Throws std::runtime_error on failure.
void start_signals(const Settings& settings, const SignalMap& signals, bool pause_only = false);
// Removes the handlers and the operator callback.
void stop_signals();

// Before a thread pauses outside an operator (the Runtime's pause at a step's end): the device
// drain and HYDRO_GPU_RELEASE's release, as a pause at an operator does them. Returns the text the
// pause's log line ends with ("" without CUDA). After the pause, gpu_restore_at_resume()
// (process_gpu.h).
std::string drain_for_pause();

// The CUDA devices this process has used: those with a primary context. A process that never used
// one has nothing in flight there, and a CUDA call on it would create a context (device memory
// taken, and hundreds of milliseconds: a CPU job on a pip CUDA torch). None without CUDA.
std::vector<int> devices_in_use();

// HYDRO_SUSPEND_CHECKPOINT's current decision (SIGTSTP ends the step and checkpoints first), set
// by the Runtime from the last step's and checkpoint's durations, read when a pause comes; where
// it is off, `why_not` is what a SIGTSTP's log line says of it ("" for nothing).
void set_suspend_checkpoint(bool on, const std::string& why_not = "");
bool suspend_checkpoint_enabled();

}  // namespace hydro
