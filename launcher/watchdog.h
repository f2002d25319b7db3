// hydro-launch's watchdog: the server side of torch elastic's FileTimerServer protocol (see
// hydro/timer_table.h). Workers arm and disarm timers through a FIFO; when one expires,
// hydro-launch kills the worker's whole process group, DataLoader workers included, and the
// supervisor treats the program's death as a hang. No thread: the supervisor polls fd() beside its
// signalfd and calls check() on every turn, with poll_timeout_ms() as the poll timeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hydro/status.h"
#include "hydro/timer_table.h"

namespace hydro::launcher {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens the FIFO at `path` (absolute), creating it with mode 0600 if absent. A path that is a
  // symbolic link, exists and is not a FIFO, is another user's FIFO, lets other users in (any
  // group or other permission), or is already served by another hydro-launch is refused; what was
  // opened is checked again (fstat). Errors name --watchdog-file.
  static Status open(const std::string& path, std::unique_ptr<Watchdog>* out);
  // --watchdog-file's escapes: %t the task's rank (SLURM_PROCID), %j the job id, %% a percent sign.
  static Status expand_path(const std::string& pattern, const std::function<const char*(const char*)>& getenv,
                            std::string* out);
  ~Watchdog();  // removes the FIFO if open() created it

  const std::string& path() const { return path_; }
  int fd() const { return read_fd_; }
  // The program hydro-launch started (a process group leader): only it, its process group and its
  // descendants may arm timers and be killed.
  void set_child(pid_t child) { child_ = child; }
  // After an expiry signal that asks a worker to end (SIGTERM, SIGINT, SIGHUP, SIGQUIT), one still running
  // this long later gets SIGKILL, its process group too: a hung job never outlives its watchdog
  // because it ignores or mishandles the signal. Zero: no escalation.
  void set_kill_after(std::chrono::milliseconds d) { kill_after_ = d; }

  // Reads the requests waiting in the FIFO, at most 64 KiB per call (a flood cannot hold up the
  // supervisor's signals; poll reports the rest). A bad line is logged and ignored.
  void read_requests();
  // One request line, as read_requests() handles it (`now`: steady; `wall_now`: epoch seconds).
  void handle_line(const std::string& line, Clock::time_point now, double wall_now);
  // Milliseconds until the nearest deadline or escalation (rounded up), -1 when none.
  int poll_timeout_ms(Clock::time_point now) const;
  // A paused program (SIGTSTP, the map's pause; a suspended job is frozen 2 s later) makes no
  // progress on purpose: no timer expires while held, and release() moves every deadline later by
  // the time held, so a suspend or a pause longer than a timer never reads as a hang.
  void hold(Clock::time_point now);
  void release(Clock::time_point now);

  // Kills the workers whose timers expired by `now`, and SIGKILLs those that outlived a catchable
  // signal by kill_after. Returns one description per worker signalled on expiry, e.g.
  // "pid 1234 scope 'train step'".
  std::vector<std::string> check(Clock::time_point now);

  const TimerTable& timers() const { return table_; }
  TimerTable& timers() { return table_; }  // for tests: arm a timer with a chosen start time

 private:
  Watchdog() = default;
  std::string path_;
  bool created_ = false;
  int read_fd_ = -1;
  int hold_fd_ = -1;  // our own writer: the FIFO never reads EOF when the workers close it
  pid_t child_ = 0;
  std::string pending_;    // a partial line
  bool skipping_ = false;  // dropping an over-long line up to its newline
  TimerTable table_;
  std::optional<Clock::time_point> held_since_;
  // A catchable signal sent: SIGKILL at `at` if the same process still runs.
  struct Escalation {
    pid_t pid;
    uint64_t start_time;
    pid_t pgid;  // 0: the pid alone (it was in hydro-launch's own group)
    Clock::time_point at;
    std::string who;
    int signal;
  };
  std::chrono::milliseconds kill_after_{0};
  std::vector<Escalation> escalations_;
  void escalate(Clock::time_point now);
};

}  // namespace hydro::launcher
