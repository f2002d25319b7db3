// The pause at operators: the signal handlers' listener, and the RecordFunction callback that
// blocks every thread's next operator while a pause is pending.
#include "operator_pause.h"

#include <ATen/record_function.h>
#include <signal.h>
#include <sys/syscall.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "cuda_memory.h"
#include "hydro/log.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"
#include "raise.h"

namespace hydro {
namespace {

long thread_id() { return ::syscall(SYS_gettid); }

// HYDRO_SUSPEND_CHECKPOINT: SIGTSTP lets the step end and checkpoints before pausing (set by
// the Runtime from the last step's and the last checkpoint's durations).
std::atomic<bool> g_suspend_checkpoint{false};

// Whether this libtorch has CUDA and sees a device; decided once, when the Runtime starts.
std::atomic<bool> g_cuda{false};
// Pause without a Runtime: whether CUDA is there is asked at the first pause, not at start.
std::atomic<bool> g_cuda_unknown{false};
// HYDRO_CUDA_RELEASE=on with a CUDA libtorch: cached device memory is released while paused.
std::atomic<bool> g_cuda_release{false};

// Before a paused thread blocks, wait for the kernels it queued: then nothing is in flight on the
// device when SIGSTOP or the cgroup freeze lands. Uses libtorch's own CUDA: every stream of the
// thread's current device. Then, if asked, unused cached blocks go back to the driver, so that a
// suspended job holds only the memory its live tensors need. With a CPU-only libtorch, as
// Debian's, this is never called.
std::string drain_device() {
  torch::cuda::synchronize();
  if (!g_cuda_release) return ", CUDA device drained";
  release_cuda_cache();
  return ", CUDA device drained, cached memory released";
}

// The operator callback: registered by the watcher thread only while a pause is pending, and
// removed on resume, so that running training pays nothing for it (libtorch 1.13 still charges a
// little per operator for a registered but disabled callback). While registered, the next
// operator on every thread blocks here until resumed. Removing it while threads wait inside it is
// safe: RecordFunction keeps its own copy of the callback (a plain function pointer).
std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn) {
  PauseGate& gate = PauseGate::instance();
  if (gate.pause_pending()) {
    std::string drained = g_cuda ? drain_device() : "";
    log(std::string("paused at operator ") + fn.name() + " (thread " + std::to_string(thread_id()) + ")" + drained);
    gate.wait_while_paused();
    log(std::string("resumed at operator ") + fn.name() + " (thread " + std::to_string(thread_id()) + ")");
  }
  return nullptr;
}

std::mutex g_callback_mutex;
std::optional<at::CallbackHandle> g_callback;  // registered while a pause is pending
std::atomic<bool> g_armed{false};
bool g_pause_enabled = false;  // HYDRO_PAUSE; guarded by g_callback_mutex

void arm_operator_pause(bool on) {
  std::lock_guard<std::mutex> lock(g_callback_mutex);
  if (on && g_pause_enabled && !g_callback) {
    g_callback = at::addGlobalCallback(at::RecordFunctionCallback(on_operator).needsInputs(false));
  } else if (!on && g_callback) {
    at::removeCallback(*g_callback);
    g_callback.reset();
  }
  g_armed = g_callback.has_value();
}

void on_signal(int signo, Action action) {
  const std::string sig = signal_name(signo);
  switch (action) {
    case Action::pause:
      if (signo == SIGTSTP && g_suspend_checkpoint) {
        log("pause requested by " + sig + "; the step ends and a checkpoint commits first (they fit in the 2 s "
            "before SIGSTOP)");
      } else {
        if (g_cuda_unknown.exchange(false)) g_cuda = torch::cuda::is_available();
        arm_operator_pause(true);
        log("pause requested by " + sig);
      }
      break;
    case Action::resume:
      arm_operator_pause(false);
      log("resume requested by " + sig);
      break;
    case Action::checkpoint_exit:
      arm_operator_pause(false);
      log("checkpoint-and-exit requested by " + sig + "; the current step will finish first");
      break;
    case Action::checkpoint:
      log("checkpoint requested by " + sig + "; at the end of the current step");
      break;
  }
}

// Set while start_signals(..., pause_only) handlers are installed; a Runtime replaces them.
bool g_pause_only = false;  // guarded by g_callback_mutex

}  // namespace

bool operator_pause_armed() { return g_armed.load(); }

bool drains_cuda_on_pause() { return g_cuda.load(); }

bool releases_cuda_cache_on_pause() { return g_cuda_release.load(); }

void start_signals(const Settings& settings, const SignalMap& signals, bool pause_only) {
  // Pause only runs inside `import torch`: asking now whether CUDA is there would initialize it in
  // every program, and break those that fork CUDA workers later. The first pause asks instead.
  g_cuda_unknown = settings.pause && pause_only;
  g_cuda = settings.pause && !pause_only && torch::cuda::is_available();
  g_cuda_release = g_cuda && settings.cuda_release && cuda_cache_release_compiled();
  if (settings.cuda_release && !g_cuda_release && !pause_only)
    log(std::string("warning: HYDRO_CUDA_RELEASE=on has no effect: ") +
        (!cuda_cache_release_compiled() ? "hydro was built against a libtorch without CUDA"
         : !settings.pause          ? "pausing is off"
                                    : "no CUDA device is visible"));
  bool replace = false;
  {
    std::lock_guard<std::mutex> lock(g_callback_mutex);
    g_pause_enabled = settings.pause;
    replace = g_pause_only;
    g_pause_only = pause_only;
  }
  if (replace) SignalBridge::stop();  // not under the lock: its watcher may be waiting for it
  Status st = SignalBridge::start(signals, on_signal);
  throw_if_error(st);
}

Settings settings_from_env() {
  Settings s;
  Status st = Settings::from_env(&s);
  throw_if_error(st);
  return s;
}

bool start_pause_only() {
  Settings s = settings_from_env();
  if (!s.pause) return false;
  start_signals(s, s.signals.only({Action::pause, Action::resume}), /*pause_only=*/true);
  return true;
}

void stop_signals() {
  SignalBridge::stop();
  arm_operator_pause(false);
}

void set_suspend_checkpoint(bool on) { g_suspend_checkpoint = on; }

bool suspend_checkpoint_enabled() { return g_suspend_checkpoint.load(); }

}  // namespace hydro
