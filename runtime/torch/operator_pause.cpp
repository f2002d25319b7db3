// The pause at operators: the signal handlers' listener, and the RecordFunction callback that
// blocks every thread's next operator while a pause is pending.
#include "operator_pause.h"

#include "process_gpu.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/record_function.h>
#include <signal.h>
#include <sys/syscall.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_memory.h"
#include "hydro/log.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"
#include "hydro/setting_schema.h"
#include "raise.h"

namespace hydro {
namespace {

long thread_id() { return ::syscall(SYS_gettid); }

// Slurm's suspend: SIGTSTP, then SIGSTOP or the cgroup freeze suspend_grace_time later
// (slurmstepd's _handle_suspend; HYDRO_SUSPEND_GRACE, set by the plugin; shared/NOTES.md).
std::string suspend_grace_text(int64_t seconds) {
  const char* from = std::getenv(kSuspendGraceFromEnv);
  return std::to_string(seconds) + " s of Slurm's suspend grace time (" + env_name(Setting::suspend_grace) + ", " +
         (from && *from ? std::string("from ") + from : "not set by hydro's plugin: Slurm's default assumed") + ")";
}

// Before a paused thread blocks, wait for the kernels queued on every device this process uses:
// then nothing is in flight when SIGSTOP or the cgroup freeze lands. Uses libtorch's own CUDA.
// Then HYDRO_GPU_RELEASE gives back what it asks (process_gpu.h): the allocator's cached, unused
// blocks, or the whole device state. With a CPU-only libtorch, as Debian's, this is never called.
std::string drain_device(std::optional<std::chrono::milliseconds> until_freeze) {
  const std::vector<int> used = devices_in_use();
  if (used.empty()) return ", CUDA unused by this process: nothing to drain";
  for (int d : used) torch::cuda::synchronize(d);
  return ", CUDA device drained" + gpu_release_at_pause(used, until_freeze);
}

std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn);
void on_signal(int signo, Action action);

// The process's one operator pause: the signal bridge's handlers, the RecordFunction callback they
// arm, and what a pause does on the device. Process-wide because signals and RecordFunction's
// global callbacks are.
class OperatorPause {
 public:
  static OperatorPause& instance() {
    static OperatorPause p;
    return p;
  }

  void start(const Settings& settings, const SignalMap& signals, bool pause_only) {
    // Pause only runs inside `import torch`: asking now whether CUDA is there would initialize it
    // in every program, and break those that fork CUDA workers later. The first pause asks instead.
    cuda_unknown_ = settings.pause && pause_only;
    cuda_ = settings.pause && !pause_only && torch::cuda::is_available();
    gpu_release_ = settings.pause ? settings.gpu_release : GpuRelease::off;
    suspend_grace_ = std::chrono::seconds(settings.suspend_grace_s);
    suspend_grace_text_ = suspend_grace_text(settings.suspend_grace_s);
    if (!pause_only) gpu_release_start(gpu_release_, cuda_, settings.pause && settings.hydro_allocator);
    bool replace = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pause_enabled_ = settings.pause;
      replace = pause_only_;
      pause_only_ = pause_only;
    }
    if (replace) SignalBridge::stop();  // not under the lock: its watcher may be waiting for it
    throw_if_error(SignalBridge::start(signals, on_signal));
    std::lock_guard<std::mutex> lock(mutex_);
    handlers_in_ = true;
  }

  // After it, nothing arms the pause: not a Python handler that runs late for a signal that came
  // while the handlers were in (its pause stays pending, and no resume would ever release it).
  void stop() {
    SignalBridge::stop();
    std::lock_guard<std::mutex> lock(mutex_);
    handlers_in_ = false;
    arm_locked(false);
  }

  // Registered only while a pause is pending, and removed on resume, so that running training
  // pays nothing for it (libtorch 1.13 still charges a little per operator for a registered but
  // disabled callback). Removing it while threads wait inside it is safe: RecordFunction keeps
  // its own copy of the callback (a plain function pointer).
  void arm(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    arm_locked(on);
  }

  // arm(true) while the pause is still pending: checked under the lock that a resume's arm(false)
  // takes too, so a resume in between cannot be followed by a stale arm.
  void arm_if_pending() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handlers_in_ && PauseGate::instance().pause_pending()) arm_locked(true);
  }

  // The first pause of a pause-only start asks whether CUDA is there. The watcher and the main
  // thread may both ask: the later one waits for the answer, so neither pauses undrained.
  void learn_cuda() {
    if (!cuda_unknown_) return;
    std::lock_guard<std::mutex> lock(cuda_mutex_);
    if (!cuda_unknown_) return;
    cuda_ = torch::cuda::is_available();
    gpu_release_start(gpu_release_, cuda_);
    cuda_unknown_ = false;
  }

  // The pause signal and when it came: SIGTSTP is Slurm's suspend, whose freeze follows the
  // suspend grace time later.
  void note_pause(int signo) {
    freeze_at_ns_ =
        signo == SIGTSTP ? (std::chrono::steady_clock::now() + suspend_grace_).time_since_epoch().count() : 0;
  }

  std::string drain() {
    if (!cuda_) return "";
    const int64_t freeze_at = freeze_at_ns_;
    std::optional<std::chrono::milliseconds> until_freeze;
    if (freeze_at != 0) {
      const auto left = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(freeze_at)) -
                        std::chrono::steady_clock::now();
      until_freeze =
          std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(left));
    }
    return drain_device(until_freeze);
  }

  bool armed() const { return armed_; }
  bool cuda() const { return cuda_; }
  bool suspend_checkpoint() const { return suspend_checkpoint_; }
  void set_suspend_checkpoint(bool on, const std::string& why_not) {
    std::lock_guard<std::mutex> lock(mutex_);  // with the reason, so that suspend_note reads a pair
    suspend_checkpoint_ = on;
    suspend_checkpoint_why_not_ = why_not;
  }
  // What a SIGTSTP's log line adds: the window, and why no checkpoint comes first where none does.
  std::string suspend_note(int signo) {
    if (signo != SIGTSTP) return "";
    std::lock_guard<std::mutex> lock(mutex_);
    if (suspend_checkpoint_) return "; the step ends and a checkpoint commits first, within the " + suspend_grace_text_;
    if (suspend_checkpoint_why_not_.empty()) return "";
    return "; no checkpoint first: " + suspend_checkpoint_why_not_ + " (the " + suspend_grace_text_ + ")";
  }

 private:
  void arm_locked(bool on) {
    if (on && pause_enabled_ && !callback_) {
      callback_ = at::addGlobalCallback(at::RecordFunctionCallback(on_operator).needsInputs(false));
    } else if (!on && callback_) {
      at::removeCallback(*callback_);
      callback_.reset();
    }
    armed_ = callback_.has_value();
  }

  // HYDRO_SUSPEND_CHECKPOINT: SIGTSTP lets the step end and checkpoints before pausing (set by
  // the Runtime from the last step's and the last checkpoint's durations).
  std::atomic<bool> suspend_checkpoint_{false};
  std::atomic<bool> cuda_{false};             // this libtorch has CUDA and sees a device
  std::atomic<bool> cuda_unknown_{false};     // pause-only: asked at the first pause
  std::mutex cuda_mutex_;                     // held while it is asked
  GpuRelease gpu_release_ = GpuRelease::off;  // HYDRO_GPU_RELEASE, as asked (process_gpu.h: as in effect)
  std::atomic<int64_t> freeze_at_ns_{0};      // steady_clock: when Slurm freezes us (a pause by SIGTSTP), or 0
  std::chrono::seconds suspend_grace_{2};     // HYDRO_SUSPEND_GRACE: from SIGTSTP to the freeze
  std::atomic<bool> armed_{false};
  std::mutex mutex_;                            // guards the six below
  std::string suspend_grace_text_;              // "6 s of Slurm's suspend grace time (...)", for the log
  std::string suspend_checkpoint_why_not_;      // the Runtime's reason, when SIGTSTP checkpoints not first
  std::optional<at::CallbackHandle> callback_;  // registered while a pause is pending
  bool pause_enabled_ = false;                  // HYDRO_PAUSE
  // Between start() and stop(). Not SignalBridge::running(): its lock is held by stop() while it
  // joins the watcher, which may be waiting for mutex_.
  bool handlers_in_ = false;
  bool pause_only_ = false;  // start_pause_only()'s handlers are in; a Runtime replaces them
};

// While the callback is registered, the next operator on every thread blocks here until resumed.
std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn) {
  PauseGate& gate = PauseGate::instance();
  if (gate.pause_pending()) {
    std::string drained = OperatorPause::instance().drain();
    gate.wait_while_paused([&] {
      log(std::string("paused at operator ") + fn.name() + " (thread " + std::to_string(thread_id()) + ")" + drained);
    });
    gpu_restore_at_resume();
    log(std::string("resumed at operator ") + fn.name() + " (thread " + std::to_string(thread_id()) + ")");
  }
  return nullptr;
}

// SIGTSTP under HYDRO_SUSPEND_CHECKPOINT: the step ends and checkpoints before the pause arms.
bool waits_for_the_step_end(int signo) { return signo == SIGTSTP && OperatorPause::instance().suspend_checkpoint(); }

void on_signal(int signo, Action action) {
  OperatorPause& p = OperatorPause::instance();
  const std::string sig = signal_name(signo);
  switch (action) {
    case Action::pause:
      p.note_pause(signo);
      if (waits_for_the_step_end(signo)) {
        log("pause requested by " + sig + p.suspend_note(signo));
      } else {
        p.learn_cuda();
        p.arm(true);
        log("pause requested by " + sig + p.suspend_note(signo));
      }
      break;
    case Action::resume:
      p.arm(false);
      log("resume requested by " + sig);
      break;
    case Action::checkpoint_exit:
      p.arm(false);
      log("checkpoint-and-exit requested by " + sig + "; the current step will finish first");
      break;
    case Action::checkpoint: log("checkpoint requested by " + sig + "; at the end of the current step"); break;
  }
}

}  // namespace

std::vector<int> devices_in_use() {
  const auto& hooks = at::detail::getCUDAHooks();
  std::vector<int> used;
  const int n = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < n; ++i)
    if (hooks.hasPrimaryContext(static_cast<c10::DeviceIndex>(i))) used.push_back(i);
  return used;
}

void arm_pause_now(int signo) {
  OperatorPause& p = OperatorPause::instance();
  p.note_pause(signo);
  if (waits_for_the_step_end(signo)) return;
  p.learn_cuda();
  p.arm_if_pending();
}

std::vector<int> pause_signals_from_env() {
  std::vector<int> out;
  const Settings s = settings_from_env();
  if (!s.pause) return out;
  for (const auto& [signo, action] : s.signals.entries())
    if (action == Action::pause) out.push_back(signo);
  return out;
}

bool operator_pause_armed() { return OperatorPause::instance().armed(); }

std::string drain_for_pause() {
  OperatorPause& p = OperatorPause::instance();
  p.learn_cuda();
  return p.drain();
}

bool drains_cuda_on_pause() { return OperatorPause::instance().cuda(); }

bool releases_cuda_cache_on_pause() { return gpu_release_mode() != GpuRelease::off; }

void start_signals(const Settings& settings, const SignalMap& signals, bool pause_only) {
  OperatorPause::instance().start(settings, signals, pause_only);
}

Settings settings_from_env() {
  Settings s;
  throw_if_error(Settings::from_env(&s));
  return s;
}

bool start_pause_only() {
  Settings s = settings_from_env();
  if (!s.pause) return false;
  start_signals(s, s.signals.only({Action::pause, Action::resume}), /*pause_only=*/true);
  return true;
}

void stop_signals() { OperatorPause::instance().stop(); }

void set_suspend_checkpoint(bool on, const std::string& why_not) {
  OperatorPause::instance().set_suspend_checkpoint(on, why_not);
}

bool suspend_checkpoint_enabled() { return OperatorPause::instance().suspend_checkpoint(); }

}  // namespace hydro
