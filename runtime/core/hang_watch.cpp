#include "hydro/hang_watch.h"

#include <algorithm>

#include "hydro/pause_gate.h"

namespace hydro {

void RunningClock::restart(Clock::time_point now) {
  last_ = now;
  running_ = Clock::duration{0};
  held_ = Clock::duration{0};
}

void RunningClock::observe(Clock::time_point now, bool held) {
  const Clock::duration gap = now - last_;
  last_ = now;
  if (gap <= Clock::duration{0}) return;
  if (held || gap > max_gap_)
    held_ += gap;
  else
    running_ += gap;
}

namespace {
bool pause_pending() { return PauseGate::instance().pause_pending(); }
}  // namespace

RunningDeadline::RunningDeadline(Clock::duration budget, std::chrono::milliseconds looks_every,
                                 std::function<bool()> held)
    : looks_every_(looks_every),
      clock_(4 * looks_every),
      budget_(budget),
      held_(held ? std::move(held) : pause_pending) {
  clock_.restart(Clock::now());
}

RunningDeadline::Clock::duration RunningDeadline::left() {
  clock_.observe(Clock::now(), held_());
  return budget_ - clock_.running();
}

std::chrono::milliseconds RunningDeadline::next_wait() {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left());
  return std::clamp(ms, std::chrono::milliseconds{0}, looks_every_);
}

HangWatch::HangWatch(std::chrono::milliseconds timeout, OnHang on_hang, std::chrono::milliseconds poll,
                     std::function<bool()> held, WorkSignal* work)
    : timeout_(timeout),
      on_hang_(std::move(on_hang)),
      poll_(poll),
      held_(held ? std::move(held) : pause_pending),
      work_(work) {
  thread_ = std::thread([this] { run(); });
}

HangWatch::~HangWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HangWatch::run() {
  // A gap of 5 polls is no scheduling delay: the process was stopped.
  RunningClock clock(5 * poll_);
  clock.restart(Clock::now());
  uint64_t seen = 0;  // nothing counts before the first progress
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, poll_, [this] { return stop_; })) {
    const auto now = Clock::now();
    const uint64_t p = progress_.load(std::memory_order_relaxed);
    if (p == 0) continue;
    if (p != seen) {
      seen = p;
      clock.restart(now);
      continue;
    }
    const bool held = held_();
    clock.observe(now, held);
    if (work_ && !held && clock.running() >= timeout_ / 2 && working(lock)) {
      clock.restart(Clock::now());
      continue;
    }
    if (clock.running() >= timeout_) {
      using Seconds = std::chrono::duration<double>;
      lock.unlock();
      on_hang_(Seconds(clock.running()).count(), Seconds(clock.held()).count());
      return;
    }
  }
}

// The probe may take half a poll: the destructor need not wait for it to set stop_.
bool HangWatch::working(std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  const bool w = work_->working(poll_ / 2);
  lock.lock();
  return w;
}

}  // namespace hydro
