// The process-wide pause state. Signal handlers write it (async-signal-safe: atomics and a futex
// wake only); training threads read it at operator and step boundaries and block on the futex,
// which a signal handler can wake, while paused.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "hydro/signal_map.h"
#include "hydro/status.h"

namespace hydro {

class PauseGate {
 public:
  static PauseGate& instance();

  // Async-signal-safe.
  void request_pause() noexcept;
  void request_resume() noexcept;
  void request_exit() noexcept;  // checkpoint-and-exit; also releases a pause so the step can end
  bool pause_pending() const noexcept { return word_.load(std::memory_order_acquire) & 1u; }
  // The signal of the latest pause request (set by the handler before the request).
  void note_pause_signal(int signo) noexcept { pause_signal_.store(signo, std::memory_order_release); }
  int pause_signal() const noexcept { return pause_signal_.load(std::memory_order_acquire); }
  bool exit_requested() const noexcept { return exit_.load(std::memory_order_acquire); }
  void request_checkpoint() noexcept { checkpoint_.store(true, std::memory_order_release); }
  // True once per request (requests before it is taken coalesce into one checkpoint).
  bool take_checkpoint_request() noexcept { return checkpoint_.exchange(false, std::memory_order_acq_rel); }

  // Blocks the calling thread until the pause is released. Returns at once when none is pending.
  // `on_blocked` (a log line) runs once the thread counts as paused, its time stamped, and before
  // it waits: a pause's latency is the training's, not the log's. What it throws is dropped.
  void wait_while_paused(const std::function<void()>& on_blocked = nullptr) noexcept;
  // Threads blocked in wait_while_paused() right now.
  int threads_waiting() const noexcept { return waiting_.load(std::memory_order_acquire); }
  // steady_clock time (ns) at which a thread last began to wait, and last stopped waiting.
  int64_t last_block_ns() const noexcept { return blocked_ns_.load(std::memory_order_acquire); }
  int64_t last_release_ns() const noexcept { return released_ns_.load(std::memory_order_acquire); }

  // No checkpoint or exit asked for: a new Runtime does not inherit an earlier one's requests.
  void clear_requests() noexcept;
  // Nothing pending, nobody waiting: the state of a child forked while the parent was paused.
  void forget() noexcept;
  void reset_for_test() noexcept;

 private:
  // Bit 0: paused. Bits 1..: a generation bumped on every release, so a waiter never sleeps
  // through a release that happened between its check and its futex wait.
  std::atomic<uint32_t> word_{0};
  std::atomic<bool> exit_{false};
  std::atomic<bool> checkpoint_{false};
  std::atomic<int> pause_signal_{0};
  std::atomic<int> waiting_{0};
  std::atomic<int64_t> blocked_ns_{0};
  std::atomic<int64_t> released_ns_{0};
};

// Installs handlers for every signal in a SignalMap. A handler applies the action to the
// PauseGate, chains to any handler installed before ours, and writes the signal number to a
// wakeup pipe. A watcher thread reads the pipe and calls `listener` outside signal context.
// In a child forked without exec (a DataLoader worker) the inherited handlers ignore the signals
// and the child's gate starts released; exec() restores the default dispositions.
// start() unblocks the map's signals in the calling thread: those that came while they were
// blocked (SignalMap::blocked_until_handled) are handled then.
class SignalBridge {
 public:
  using Listener = std::function<void(int signo, Action action)>;
  static Status start(const SignalMap& map, Listener listener);
  // Restores the previous handlers and joins the watcher. Safe to call when not started.
  static void stop();
  // The process is on its way out after its exit checkpoint: `signo` is ignored from now on, also
  // once stop() has put the previous handlers back, so that a second request to exit (another
  // task's hydro-launch, or its own time limit a moment later) cannot turn the exit status 75 into
  // death by the signal during the program's teardown.
  static void ignore_from_now_on(int signo);
  // Returns once the watcher has passed every signal that came before the call on to its
  // listener (which logs what each asked for), so that a decision taken on a request is logged
  // after the request; at once on the watcher's own thread.
  static void drain();
  // The handlers are in (start() was called, stop() not since).
  static bool running();
  // Puts hydro's handlers back on those of its signals whose handler was replaced since start()
  // (a framework that sets its own, as Lightning does for SIGTERM when its fit starts); they chain
  // to what they chained to before, not to the newcomer. Returns the signals taken back. A no-op
  // when not started.
  static std::vector<int> reclaim();
};

}  // namespace hydro
