// A hang watch that counts only running time. torch's process groups measure their timeouts in
// wall-clock time, which a suspend does not stop: hydro gives them a timeout no hold can reach
// (hydro.groups) and watches for the hang itself here, with the user's timeout.
//
// Running time is the time since the last progress() (the end of a step; nothing counts before the
// first, which may include a resume or a compile that the ranks do at once) or since the last poll
// that found work going on (WorkSignal: an operator ran, so that an evaluation between two steps
// is no hang, as torch's own timeout, per collective, would not end it), less the time the job
// was held: while the PauseGate has a pause pending (SIGTSTP, hydroctl pause, the map's pause
// signal), and any gap between the watch's own polls longer than `max_gap` (the process was
// stopped: SIGSTOP, a cgroup freeze). A rank stopped alone is no hold for its peers: their
// watches go on counting while they wait for it in a collective.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace hydro {

// torch's timeout for a process group whose own timeout hydro watches: longer than any hold (a
// year; added to steady_clock's int64 nanoseconds safely). hydro.groups uses it too.
constexpr std::chrono::hours kHoldProof{24 * 365};

// The arithmetic, with the clock and the hold passed in (tests drive it directly).
class RunningClock {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RunningClock(Clock::duration max_gap) : max_gap_(max_gap) {}
  // Starts counting again from zero at `now`.
  void restart(Clock::time_point now);
  // Counts the time since the last observe() or restart(), unless the job was held or the gap is
  // longer than max_gap.
  void observe(Clock::time_point now, bool held);
  Clock::duration running() const { return running_; }
  Clock::duration held() const { return held_; }

 private:
  Clock::duration max_gap_;
  Clock::time_point last_{};
  Clock::duration running_{0};
  Clock::duration held_{0};
};

// A deadline in running time: `budget` from its making, less the time the process was held (a
// pause pending, or a stop: a gap of more than 4 × `looks_every` between two looks). A wait looks
// at least that often (next_wait() gives slices of `looks_every`): a suspend of any length runs
// out no wait. The ranks' store and the waits built on it count their timeouts with it.
class RunningDeadline {
 public:
  using Clock = RunningClock::Clock;
  static constexpr std::chrono::milliseconds kSlice{500};  // the default look

  // `held` as for HangWatch (default: the PauseGate has a pause pending).
  explicit RunningDeadline(Clock::duration budget, std::chrono::milliseconds looks_every = kSlice,
                           std::function<bool()> held = nullptr);
  // The running time left, counted up to now; zero or less once past.
  Clock::duration left();
  bool passed() { return left() <= Clock::duration{0}; }
  // How long the next wait may last: the time left, at most `looks_every` (zero once past).
  std::chrono::milliseconds next_wait();

 private:
  std::chrono::milliseconds looks_every_;
  RunningClock clock_;
  Clock::duration budget_;
  std::function<bool()> held_;
};

// Work going on between two steps. Asked only once no step has ended for half the timeout: while
// steps end, it costs nothing.
class WorkSignal {
 public:
  virtual ~WorkSignal() = default;
  // Whether work goes on now: it may watch for up to `within`.
  virtual bool working(std::chrono::milliseconds within) = 0;
};

class HangWatch {
 public:
  using Clock = RunningClock::Clock;
  // Called once, on the watch's thread, with the running and held seconds since the last progress.
  using OnHang = std::function<void(double running_s, double held_s)>;

  // `held` says whether the job is held now (default: the PauseGate has a pause pending).
  // `work` (not owned; it outlives the watch), or none: only a step's end is progress.
  HangWatch(std::chrono::milliseconds timeout, OnHang on_hang,
            std::chrono::milliseconds poll = std::chrono::milliseconds(200), std::function<bool()> held = nullptr,
            WorkSignal* work = nullptr);
  ~HangWatch();  // stops the thread
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // The job made progress (a step ended): running time starts again from zero. Lock-free.
  void progress() noexcept { progress_.fetch_add(1, std::memory_order_relaxed); }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void run();
  bool working(std::unique_lock<std::mutex>& lock);

  std::chrono::milliseconds timeout_;
  OnHang on_hang_;
  std::chrono::milliseconds poll_;
  std::function<bool()> held_;
  WorkSignal* work_;
  std::atomic<uint64_t> progress_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hydro
