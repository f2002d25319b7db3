#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>

#include "hydro/checkpoint_dir.h"
#include "hydro/log.h"
#include "hydro/exit_codes.h"
#include "hydro/launch_ready.h"
#include "hydro/settings.h"
#include "hydro/signal_map.h"
#include "hydro/subprocess.h"
#include "preemption.h"
#include "time_limit.h"
#include "watchdog.h"

namespace hydro::launcher {
namespace {

void say(const std::string& m) { log_line("hydro-launch", m); }

// How long a checkpoint-and-exit request waits for the program's runtime to come up.
constexpr int kReadyWaitSeconds = 60;

// Signals forwarded to the training program, besides those of its signal map. Under
// proctrack/cgroup Slurm signals only the direct children of slurmstepd, so the program never sees
// these unless we pass them on.
constexpr int kAlwaysForwarded[] = {SIGTSTP, SIGCONT, SIGTERM, SIGINT, SIGHUP, SIGQUIT};

// Sets HYDRO_RESUME_FROM for the program; false when the checkpoint directory cannot be used.
bool prepare_resume(const Options& o) {
  ::unsetenv("HYDRO_RESUME_FROM");
  if (o.checkpoint_dir.empty()) {
    say("no checkpoint directory (--checkpoint-dir or HYDRO_CKPT_DIR): the program starts fresh");
    return true;
  }
  // --checkpoint-dir replaces the plugin's default: it is no longer hydro's default then.
  if (const char* env = std::getenv("HYDRO_CKPT_DIR"); !env || o.checkpoint_dir != env) ::unsetenv("HYDRO_CKPT_DIR_DEFAULT");
  ::setenv("HYDRO_CKPT_DIR", o.checkpoint_dir.c_str(), 1);
  if (std::string note = default_checkpoint_dir_note(); !note.empty()) say(note);
  CheckpointDir dir(o.checkpoint_dir);
  Status st = dir.open();
  if (!st.ok()) {
    say("error: checkpoint directory: " + st.message());
    return false;
  }
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  st = dir.latest_valid(&found, &warnings);
  for (const auto& w : warnings) say("warning: " + w);
  if (!found) {
    say("no valid checkpoint in " + o.checkpoint_dir + ": the program starts fresh");
    return true;
  }
  ::setenv("HYDRO_RESUME_FROM", found->path.c_str(), 1);
  say("resuming from step " + std::to_string(found->step) + " (" + found->path + ")");
  return true;
}

// `ready_fd`: the write end of the readiness pipe (hydro/launch_ready.h), kept open in the child.
// The program starts with hydro-launch's own mask, holding `held` (SignalMap::blocked_for_job,
// SignalMap::hold): a pause forwarded before its runtime is up waits instead of killing it.
pid_t spawn(const std::vector<std::string>& command, const sigset_t& old_mask, const sigset_t& held, int ready_fd) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setpgid(0, 0);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  SignalMap::hold(held);
  struct stat st;
  if (ready_fd >= 0 && ::fstat(ready_fd, &st) == 0 && ::fcntl(ready_fd, F_SETFD, 0) == 0) {
    ::setenv(kLaunchReadyEnv, std::to_string(ready_fd).c_str(), 1);
    ::setenv(kLaunchReadyInoEnv, std::to_string(st.st_ino).c_str(), 1);
  }
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  say("error: cannot run " + command[0] + ": " + std::strerror(errno));
  ::_exit(127);
}

// With HYDRO_PAUSE=on, the program's pause signals, to start it with blocked.
sigset_t held_signals(const SignalMap& map) {
  sigset_t none;
  sigemptyset(&none);
  const char* pause = std::getenv("HYDRO_PAUSE");
  return pause && std::string(pause) == "on" ? map.blocked_until_handled() : none;
}

int requeue_job(const std::string& scontrol, const std::string& job_id) {
  std::string out;
  int rc = run_capture({scontrol, "requeue", job_id}, &out);
  if (!out.empty()) say(scontrol + " requeue: " + out);
  return rc;
}

}  // namespace

int run(const Options& o) {
  sigset_t handled, old_mask;
  sigemptyset(&handled);
  for (int s : kAlwaysForwarded) sigaddset(&handled, s);
  for (int s : o.signals.signals()) sigaddset(&handled, s);
  sigaddset(&handled, SIGCHLD);
  if (o.requeue_signal) sigaddset(&handled, o.requeue_signal);
  ::sigprocmask(SIG_BLOCK, &handled, &old_mask);
  int sfd = ::signalfd(-1, &handled, SFD_CLOEXEC);
  if (sfd < 0) {
    say(std::string("error: signalfd: ") + std::strerror(errno));
    return 1;
  }

  if (!prepare_resume(o)) return 2;
  std::unique_ptr<Watchdog> watchdog;
  if (!o.watchdog_file.empty()) {
    Status st = Watchdog::open(o.watchdog_file, &watchdog);
    if (!st.ok()) {
      say("error: " + st.message());
      return 2;
    }
    watchdog->set_kill_after(std::chrono::milliseconds(static_cast<int64_t>(o.watchdog_kill_after * 1000)));
    // FileTimerClient users read TORCHELASTIC_TIMER_FILE (as under torchrun); hydro::WatchdogClient
    // reads HYDRO_WATCHDOG_FILE.
    ::setenv("HYDRO_WATCHDOG_FILE", o.watchdog_file.c_str(), 1);
    ::setenv("TORCHELASTIC_TIMER_FILE", o.watchdog_file.c_str(), 1);
    say("watchdog: timers are read from " + o.watchdog_file);
  }
  int ready[2] = {-1, -1};
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    say(std::string("error: pipe: ") + std::strerror(errno));
    return 1;
  }
  pid_t child = spawn(o.command, old_mask, held_signals(o.signals), ready[1]);
  ::close(ready[1]);
  // The read end stays open until the end (a late writer must not get SIGPIPE); it is polled
  // while `awaiting_ready`.
  const int ready_fd = ready[0];
  bool awaiting_ready = true;  // false once the program is ready, or can no longer say so
  bool exit_held = false;      // a checkpoint-and-exit waits for the program to be ready
  // A program without hydro's runtime never says it is ready: it is not waited for longer.
  const std::time_t ready_deadline = std::time(nullptr) + kReadyWaitSeconds;
  // The map's checkpoint-and-exit signal (SIGTERM by default); a map with none: SIGTERM still ends it.
  int exit_signal = o.signals.signal_for(Action::checkpoint_exit);
  if (!exit_signal) exit_signal = SIGTERM;
  // Asks the program to checkpoint and exit, or holds that until its runtime is up.
  auto ask_exit = [&](const std::string& why) {
    if (awaiting_ready) {
      if (!exit_held)
        say(why + ": the program's hydro runtime is not up yet; asking it to checkpoint and exit once it is");
      exit_held = true;
      return;
    }
    say(why + ": asking the program to checkpoint and exit (" + signal_name(exit_signal) + "), then requeueing the job");
    ::kill(child, exit_signal);
  };
  if (child < 0) {
    say(std::string("error: fork: ") + std::strerror(errno));
    return 1;
  }
  say("started " + o.command[0] + " as pid " + std::to_string(child));
  if (watchdog) watchdog->set_child(child);
  const char* job_env = std::getenv("SLURM_JOB_ID");
  std::unique_ptr<TimeLimitWatch> time_limit;
  if (o.time_limit_margin > 0) {
    if (job_env && *job_env)
      time_limit = std::make_unique<TimeLimitWatch>(o.time_limit_margin,
                                                    TimeLimitWatch::from_scontrol(o.scontrol, job_env), say);
    else
      say("--time-limit-margin: not in a Slurm job (no SLURM_JOB_ID); no time limit to watch");
  }

  bool terminating = false;
  std::string hang;  // set when the watchdog killed a worker: the program's end is a hang
  int status = 0;
  for (;;) {
    struct pollfd fds[3] = {
        {sfd, POLLIN, 0}, {watchdog ? watchdog->fd() : -1, POLLIN, 0}, {awaiting_ready ? ready_fd : -1, POLLIN, 0}};
    int timeout = watchdog ? watchdog->poll_timeout_ms(Watchdog::Clock::now()) : -1;
    if (time_limit) {
      int t = time_limit->poll_timeout_ms(std::time(nullptr));
      if (t >= 0 && (timeout < 0 || t < timeout)) timeout = t;
    }
    if (exit_held) {
      int t = static_cast<int>(std::max<std::time_t>(0, ready_deadline - std::time(nullptr)) * 1000);
      if (timeout < 0 || t < timeout) timeout = t;
    }
    int r = ::poll(fds, 3, timeout);
    if (r < 0 && errno != EINTR) {
      say(std::string("error: poll: ") + std::strerror(errno) + "; killing the program");
      ::kill(-child, SIGKILL);
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (watchdog) {
      if (r > 0 && (fds[1].revents & POLLIN)) watchdog->read_requests();
      for (const auto& killed : watchdog->check(Watchdog::Clock::now()))
        if (hang.empty()) hang = killed;
    }
    if (r > 0 && awaiting_ready && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) {
      char byte = 0;
      ssize_t n = ::read(ready_fd, &byte, 1);
      if (n >= 0 || errno != EINTR) {
        // One byte: the runtime is up. EOF: the program closed it or ended without a runtime;
        // either way nothing more will come.
        awaiting_ready = false;
        if (exit_held && n == 1) {
          say("the program's hydro runtime is up: asking it to checkpoint and exit (" + signal_name(exit_signal) +
              "), then requeueing the job");
          ::kill(child, exit_signal);
        } else if (exit_held) {
          say("the program closed its readiness pipe without a hydro runtime: asking it to exit (SIGTERM)");
          ::kill(child, SIGTERM);
        }
        exit_held = false;
      }
    }
    if (exit_held && std::time(nullptr) >= ready_deadline) {
      say("the program did not say its hydro runtime is up within " + std::to_string(kReadyWaitSeconds) +
          " s of its start: asking it to checkpoint and exit (" + signal_name(exit_signal) + ") anyway");
      ::kill(child, exit_signal);
      exit_held = false;
      awaiting_ready = false;
    }
    if (time_limit && time_limit->check(std::time(nullptr)))
      ask_exit("time limit: --time-limit-margin " + std::to_string(o.time_limit_margin) + " s before the job's end");
    if (r <= 0 || !(fds[0].revents & POLLIN)) continue;

    struct signalfd_siginfo si;
    ssize_t n = ::read(sfd, &si, sizeof si);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof si) {
      say(std::string("error: reading signals: ") + std::strerror(errno) + "; killing the program");
      ::kill(-child, SIGKILL);
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) {
      pid_t r = ::waitpid(child, &status, WNOHANG);
      if (r == child) break;
      continue;
    }
    if (o.requeue_signal && sig == o.requeue_signal) {
      ask_exit(signal_name(sig));
      continue;
    }
    if (sig == SIGTERM) terminating = true;
    say("forwarding " + signal_name(sig) + " to pid " + std::to_string(child));
    ::kill(child, sig);
  }
  watchdog.reset();  // removes the FIFO if hydro-launch created it
  ::close(ready_fd);

  const char* job_id = job_env;
  ExitDecision d;
  const char* restarts_env = std::getenv("SLURM_RESTART_COUNT");
  int restarts = parse_restart_count(restarts_env);
  if (restarts < 0) {
    say(std::string("warning: SLURM_RESTART_COUNT='") + restarts_env + "' is not a number; counting 0 restarts");
    restarts = 0;
  }
  if (hang.empty()) {
    d = decide_exit(status, terminating, job_id && *job_id);
    if (d.requeue && restarts >= o.max_restarts) {
      d.requeue = false;
      d.why = "the program checkpointed and asks to be run again, but not requeueing: the job has been restarted " +
              std::to_string(restarts) + " times (SLURM_RESTART_COUNT) and --max-restarts is " +
              std::to_string(o.max_restarts);
    }
    if (terminating && !d.requeue && d.exit_code == kExitRequeue && job_id && *job_id) {
      std::string when = job_preempt_time(o.scontrol, job_id);
      if (!when.empty()) {
        d.requeue = true;
        d.why = "the program checkpointed; the job is being preempted (PreemptTime=" + when +
                "): requeueing it now, so that it resumes once the preemptor ends";
      }
    }
  } else {
    d = decide_watchdog_exit(hang, terminating, job_id && *job_id, restarts, o.max_restarts);
  }
  // With several tasks (srun -n N hydro-launch ...), every task's hydro-launch decides the same;
  // the one of task 0 requeues the job, once.
  if (const char* procid = std::getenv("SLURM_PROCID"); d.requeue && procid && std::string(procid) != "0") {
    d.requeue = false;
    d.why += " (hydro-launch of task 0 runs the requeue)";
  }
  say(d.why);
  if (d.requeue) {
    int rc = requeue_job(o.scontrol, job_id);
    if (rc != 0) {
      say("error: " + o.scontrol + " requeue " + job_id + " failed with status " + std::to_string(rc) +
          "; the job was not requeued (was it submitted with --requeue?)");
      return d.exit_code;
    }
    say("job " + std::string(job_id) + " requeued");
  }
  return d.exit_code;
}

}  // namespace hydro::launcher
