// The watchdog's timer table and its wire format: pure logic, no clock reads, no /proc, no signals.
//
// The wire format is torch elastic's FileTimerServer protocol (torch 1.13,
// torch/distributed/elastic/timer/file_based_local_timer.py), so that a Python worker using
// FileTimerClient talks to hydro-launch unchanged. One JSON object per line, written atomically
// (at most PIPE_BUF bytes) into a FIFO:
//
//   {"version": 1, "pid": 1234, "scope_id": "train step", "expiration_time": 1700000000.5, "signal": 9}
//
// `expiration_time` is wall-clock epoch seconds; a negative value releases the timer (pid, scope_id).
// `signal` is sent on expiry; 0 or negative means "log it, do not kill" (as torch does).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hydro/status.h"

namespace hydro {

constexpr int kTimerProtocolVersion = 1;

struct TimerRequest {
  int version = kTimerProtocolVersion;
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = -1;  // wall-clock epoch seconds; negative = release
  int signal = 0;

  bool is_release() const { return expiration_time < 0; }
};

// One line (without its newline) -> request. Errors are invalid_argument with the exact reason
// and the line, e.g. "watchdog request: missing field 'pid': {...}".
Status parse_timer_request(const std::string& line, TimerRequest* out);
// The line a client writes, without the newline (key order as torch writes it).
std::string format_timer_request(const TimerRequest& request);

// The armed timers, keyed by (pid, scope_id). Deadlines are steady_clock time points: the server
// converts a request's wall-clock expiration once, when it arrives.
class TimerTable {
 public:
  using Clock = std::chrono::steady_clock;

  struct Timer {
    pid_t pid = 0;
    std::string scope_id;
    Clock::time_point deadline;
    int signal = 0;
    // The worker's start time (/proc/PID/stat field 22) when it armed the timer: a pid that has
    // been reused since then has a different one, and must not be killed.
    uint64_t start_time = 0;
  };

  // What expired for one worker: the timer that decides the signal (the earliest one with a
  // signal > 0, else the earliest one) and the scopes of all its expired timers, earliest first.
  struct Expiry {
    Timer timer;
    std::vector<std::string> scopes;
    Clock::time_point first_deadline;  // the earliest of them
  };

  // Arms (or re-arms: replaces the deadline, signal and start time of) the timer (pid, scope_id).
  void arm(Timer timer);
  // Returns false when no such timer was armed.
  bool disarm(pid_t pid, const std::string& scope_id);
  // Drops every timer of `pid`.
  void clear(pid_t pid);

  // Moves every deadline `by` later (the time the workers were paused: see Watchdog::release).
  void shift(Clock::duration by);
  // The nearest deadline, if any timer is armed.
  std::optional<Clock::time_point> next_deadline() const;
  // Removes and returns the workers with a timer whose deadline is <= now, earliest deadline
  // first. All timers of such a worker are dropped, expired or not (torch's FileTimerServer
  // clears a reaped worker the same way).
  std::vector<Expiry> take_expired(Clock::time_point now);

  size_t size() const { return timers_.size(); }
  bool empty() const { return timers_.empty(); }

 private:
  std::map<std::pair<pid_t, std::string>, Timer> timers_;
};

}  // namespace hydro
