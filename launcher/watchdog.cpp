#include "watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "say.h"
#include "hydro/signal_map.h"
#include "process_info.h"

namespace hydro::launcher {
namespace {

// A request longer than this (torch's client refuses more than PIPE_BUF) is dropped.
constexpr size_t kMaxLine = 64 * 1024;
// Read per supervisor turn (read_requests), at most.
constexpr size_t kMaxReadPerTurn = 64 * 1024;
// Deadlines further away than this are clamped, so the steady_clock arithmetic cannot overflow.
constexpr double kMaxSeconds = 10.0 * 365 * 24 * 3600;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string scopes_text(const std::vector<std::string>& scopes) {
  std::string out = scopes.size() == 1 ? "scope " : "scopes ";
  for (size_t i = 0; i < scopes.size(); ++i) out += (i ? ", '" : "'") + scopes[i] + "'";
  return out;
}

// The FIFO must be the caller's and private: whoever can write to it arms and disarms timers,
// whoever can read it takes requests away (a lost disarm kills a healthy worker).
Status check_private_fifo(const std::string& path, const struct stat& st) {
  if (!S_ISFIFO(st.st_mode))
    return Status::invalid_argument("--watchdog-file: " + path +
                                    " exists and is not a FIFO; give a path that does not exist or is a FIFO");
  if (st.st_uid != ::geteuid())
    return Status::invalid_argument("--watchdog-file: " + path + " is owned by uid " + std::to_string(st.st_uid) +
                                    ", not by you (uid " + std::to_string(::geteuid()) + ")");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::invalid_argument("--watchdog-file: " + path + " has mode " + mode +
                                    ": other users could arm or take its timers; chmod 600 it, or give a path "
                                    "that does not exist");
  }
  return Status::OK();
}

}  // namespace

Status Watchdog::expand_path(const std::string& pattern, const std::function<const char*(const char*)>& getenv,
                             std::string* out) {
  out->clear();
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      *out += pattern[i];
      continue;
    }
    const char c = i + 1 < pattern.size() ? pattern[++i] : '\0';
    const char* var = c == 't' ? "SLURM_PROCID" : c == 'j' ? "SLURM_JOB_ID" : nullptr;
    if (c == '%') {
      *out += '%';
    } else if (!var) {
      return Status::invalid_argument("--watchdog-file: '" + pattern + "' has an unknown escape '%" +
                                      std::string(1, c) +
                                      "' (known: %t the task's rank, %j the job id, %% a percent sign)");
    } else {
      const char* v = getenv(var);
      if (!v || !*v)
        return Status::invalid_argument("--watchdog-file: '" + pattern + "' uses %" + std::string(1, c) + ", but " +
                                        var + " is not set (outside srun)");
      *out += v;
    }
  }
  return Status::OK();
}

Status Watchdog::open(const std::string& path, std::unique_ptr<Watchdog>* out) {
  std::unique_ptr<Watchdog> w(new Watchdog);
  w->path_ = path;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      return Status::invalid_argument("--watchdog-file: " + path +
                                      " is a symbolic link; give a path that does not exist or is a FIFO");
    HYDRO_RETURN_IF_ERROR(check_private_fifo(path, st));
  } else if (errno == ENOENT) {
    if (::mkfifo(path.c_str(), 0600) != 0)
      return Status::from_errno(errno, "--watchdog-file: cannot create the FIFO " + path);
    w->created_ = true;           // from here on the destructor removes it
    ::chmod(path.c_str(), 0600);  // whatever the umask
  } else {
    return Status::from_errno(errno, "--watchdog-file: " + path);
  }
  // The reader first: a non-blocking O_WRONLY open of a FIFO with no reader fails (ENXIO).
  w->read_fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (w->read_fd_ < 0) return Status::from_errno(errno, "--watchdog-file: cannot open the FIFO " + path);
  // What was opened, not what the path held a moment before (it may have been swapped since).
  if (::fstat(w->read_fd_, &st) != 0) return Status::from_errno(errno, "--watchdog-file: " + path);
  HYDRO_RETURN_IF_ERROR(check_private_fifo(path, st));
  // One reader per FIFO: two hydro-launch on one path would each take half of every timer's
  // requests (an arm here, its disarm there), and kill healthy workers as hung.
  if (::flock(w->read_fd_, LOCK_EX | LOCK_NB) != 0) {
    w->created_ = false;  // it is the other hydro-launch's
    return Status::invalid_argument("--watchdog-file: " + path +
                                    " is already served by another hydro-launch; give each task its own FIFO "
                                    "(%t in the path is the task's rank, e.g. /tmp/hydro-watchdog-%j.%t)");
  }
  w->hold_fd_ = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (w->hold_fd_ < 0) return Status::from_errno(errno, "--watchdog-file: cannot hold the FIFO open " + path);
  *out = std::move(w);
  return Status::OK();
}

Watchdog::~Watchdog() {
  if (hold_fd_ >= 0) ::close(hold_fd_);
  if (read_fd_ >= 0) ::close(read_fd_);
  if (created_) ::unlink(path_.c_str());
}

void Watchdog::read_requests() {
  char buf[16 * 1024];
  // At most kMaxReadPerTurn bytes per call: a worker flooding the FIFO must not stall the
  // supervisor's signal forwarding; the rest is read on its next turns.
  for (size_t taken = 0; taken < kMaxReadPerTurn;) {
    ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: drained (we hold a writer, so never EOF)
    taken += static_cast<size_t>(n);
    size_t start = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\n') continue;
      if (skipping_) {
        skipping_ = false;
      } else {
        pending_.append(buf + start, i - start);
        using namespace std::chrono;
        handle_line(pending_, Clock::now(), duration<double>(system_clock::now().time_since_epoch()).count());
      }
      pending_.clear();
      start = i + 1;
    }
    if (!skipping_) pending_.append(buf + start, static_cast<size_t>(n) - start);
    if (pending_.size() > kMaxLine) {
      say("warning: watchdog request longer than " + std::to_string(kMaxLine) + " bytes (ignored)");
      pending_.clear();
      skipping_ = true;
    }
  }
}

void Watchdog::handle_line(const std::string& line, Clock::time_point now, double wall_now) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  TimerRequest r;
  Status st = parse_timer_request(line, &r);
  if (!st.ok()) {
    say("warning: " + st.message() + " (ignored)");
    return;
  }
  if (r.is_release()) {
    table_.disarm(r.pid, r.scope_id);
    return;
  }
  const std::string what = "timer '" + r.scope_id + "' of pid " + std::to_string(r.pid);
  auto proc = read_proc_stat(r.pid);
  if (!proc) {  // torch's server skips a worker that is gone, too
    say("watchdog: ignoring " + what + ": no such process");
    return;
  }
  if (!in_tree(r.pid, child_)) {
    say("warning: watchdog: ignoring " + what + ": it is not in hydro-launch's process tree (process group " +
        std::to_string(child_) + " or its descendants), so hydro-launch will not kill it");
    return;
  }
  double seconds = std::min(r.expiration_time - wall_now, kMaxSeconds);
  TimerTable::Timer t;
  t.pid = r.pid;
  t.scope_id = r.scope_id;
  t.deadline = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  t.signal = r.signal;
  t.start_time = proc->start_time;
  table_.arm(std::move(t));
}

void Watchdog::hold(Clock::time_point now) {
  if (held_since_) return;
  held_since_ = now;
  say("watchdog: timers held while the program is paused");
}

void Watchdog::release(Clock::time_point now) {
  if (!held_since_) return;
  const auto held = now - *held_since_;
  held_since_.reset();
  table_.shift(held);
  say("watchdog: timers run again, " + seconds_text(std::chrono::duration<double>(held).count()) + " later");
}

int Watchdog::poll_timeout_ms(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  if (!held_since_) next = table_.next_deadline();
  for (const auto& e : escalations_)
    if (!next || e.at < *next) next = e.at;
  if (!next) return -1;
  if (*next <= now) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
  return ms > 24 * 3600 * 1000 ? 24 * 3600 * 1000 : static_cast<int>(ms);
}

// The signals a worker is asked to end on; others (SIGUSR1, SIGWINCH: hydro's pause, checkpoint)
// are not followed by SIGKILL.
static bool asks_to_end(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT; }

void Watchdog::escalate(Clock::time_point now) {
  for (auto it = escalations_.begin(); it != escalations_.end();) {
    if (it->at > now) {
      ++it;
      continue;
    }
    auto proc = read_proc_stat(it->pid);
    if (proc && proc->start_time == it->start_time && proc->state != 'Z') {
      const std::string after = seconds_text(std::chrono::duration<double>(kill_after_).count());
      // Its group now (it may have moved), unless that is hydro-launch's own.
      if (it->pgid > 0 && proc->pgid != ::getpgrp()) {
        say("watchdog: " + it->who + " still runs " + after + " after " + signal_name(it->signal) +
            "; sending SIGKILL to its process group " + std::to_string(proc->pgid));
        if (::kill(-proc->pgid, SIGKILL) != 0 && errno != ESRCH)
          say(std::string("error: watchdog: kill: ") + std::strerror(errno));
      } else {
        say("watchdog: " + it->who + " still runs " + after + " after " + signal_name(it->signal) +
            "; sending SIGKILL to pid " + std::to_string(it->pid));
        ::kill(it->pid, SIGKILL);
      }
    }
    it = escalations_.erase(it);
  }
}

std::vector<std::string> Watchdog::check(Clock::time_point now) {
  escalate(now);
  std::vector<std::string> killed;
  if (held_since_) return killed;
  for (const auto& e : table_.take_expired(now)) {
    const auto& t = e.timer;
    const std::string pid = std::to_string(t.pid);
    const std::string who = "pid " + pid + " " + scopes_text(e.scopes);
    const std::string ago = seconds_text(std::chrono::duration<double>(now - t.deadline).count()) + " ago";
    if (t.signal <= 0) {
      say("watchdog expired: " + who + " (" + ago + "); the timer asks for no signal (" + std::to_string(t.signal) +
          "): not killing it");
      continue;
    }
    // The pid-reuse guard: the process must be the one that armed the timer.
    auto proc = read_proc_stat(t.pid);
    if (!proc || proc->start_time != t.start_time) {
      say("watchdog expired: " + who + " (" + ago + "), but pid " + pid +
          " has exited since (or is another process now): nothing to kill");
      continue;
    }
    if (!in_tree(t.pid, child_)) {
      say("warning: watchdog expired: " + who + " (" + ago + "), but pid " + pid +
          " has left hydro-launch's process tree: not killing it");
      continue;
    }
    if (proc->pgid == ::getpgrp()) {
      // It joined hydro-launch's own group: killing the group would kill hydro-launch too.
      say("watchdog expired: " + who + " (" + ago + "); sending " + signal_name(t.signal) + " to pid " + pid +
          " (it is in hydro-launch's own process group)");
      ::kill(t.pid, t.signal);
      if (asks_to_end(t.signal) && kill_after_.count() > 0)
        escalations_.push_back({t.pid, t.start_time, 0, now + kill_after_, who, t.signal});
    } else {
      say("watchdog expired: " + who + " (" + ago + "); sending " + signal_name(t.signal) + " to its process group " +
          std::to_string(proc->pgid));
      if (::kill(-proc->pgid, t.signal) != 0 && errno != ESRCH)
        say(std::string("error: watchdog: kill: ") + std::strerror(errno));
      if (asks_to_end(t.signal) && kill_after_.count() > 0)
        escalations_.push_back({t.pid, t.start_time, proc->pgid, now + kill_after_, who, t.signal});
    }
    killed.push_back(who);
  }
  return killed;
}

}  // namespace hydro::launcher
