// The worker's side of hydro-launch's watchdog: arm a timer before work that can hang (a collective,
// a step, a checkpoint), disarm it after. If the timer expires first, hydro-launch kills the
// worker's whole process group (DataLoader workers included) and requeues the job.
//
//   hydro::WatchdogClient watchdog;              // the FIFO from $HYDRO_WATCHDOG_FILE
//   {
//     hydro::ScopedTimer t(watchdog, "train step", 600);  // armed for 600 s
//     step();
//   }                                            // disarmed
//
// The requests are torch elastic's FileTimerClient lines (see hydro/timer_table.h), so a Python
// worker can use torch.distributed.elastic.timer.FileTimerClient on the same FIFO instead.
//
// With no FIFO configured (neither variable set, e.g. hydro-launch ran without --watchdog-file)
// the client is disabled: arm() and disarm() do nothing and return OK, so code can arm timers
// unconditionally.
#pragma once

#include <csignal>
#include <string>

#include "hydro/status.h"

namespace hydro {

class WatchdogClient {
 public:
  // The FIFO named by $HYDRO_WATCHDOG_FILE, else $TORCHELASTIC_TIMER_FILE; disabled when both
  // are unset or empty. On expiry the worker gets SIGKILL.
  WatchdogClient();
  // An explicit FIFO (empty = disabled) and the signal to be killed with (0 = only log it).
  explicit WatchdogClient(std::string fifo_path, int signal = SIGKILL);

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Arms (or re-arms) the timer `scope_id` of this process to expire `seconds` from now.
  // Errors name the FIFO: a missing hydro-launch (nobody reads the FIFO) is an io error;
  // seconds <= 0 or a scope_id that makes the request longer than PIPE_BUF is invalid_argument.
  Status arm(const std::string& scope_id, double seconds);
  // Releases the timer `scope_id` of this process (releasing one not armed is harmless).
  Status disarm(const std::string& scope_id);

 private:
  Status send(const std::string& line);
  std::string path_;
  int signal_;
};

// Arms a timer for the lifetime of the object and disarms it in the destructor. Never throws: an
// arm that fails is logged once ("hydro: watchdog: ...") and kept in status().
class ScopedTimer {
 public:
  ScopedTimer(WatchdogClient& client, std::string scope_id, double seconds);
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

  const Status& status() const { return status_; }
  // Armed again, SECONDS from now, in one request, with no moment disarmed in between: one timer
  // re-armed at each step's start leaves no gap between steps in which a hang would go unseen.
  const Status& rearm(double seconds);

 private:
  WatchdogClient& client_;
  std::string scope_id_;
  Status status_;
};

}  // namespace hydro
