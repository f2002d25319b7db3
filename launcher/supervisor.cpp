#include "supervisor.h"

#include <poll.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <chrono>
#include <ctime>
#include <memory>
#include <optional>

#include "hydro/checkpoint_dir.h"
#include "resume.h"
#include "hydro/dist_env.h"
#include "say.h"
#include "hydro/exit_codes.h"
#include "hydro/signal_map.h"
#include "generations.h"
#include "preemption.h"
#include "process_info.h"
#include "program_spawn.h"
#include "requeue.h"
#include "runtime_pipe.h"
#include "time_limit.h"
#include "watchdog.h"
#include "supervisor_loop.h"
#include "worker_reports.h"

namespace hydro::launcher {
namespace {

// Signals forwarded to the training program, besides those of its signal map. Under
// proctrack/cgroup Slurm signals only the direct children of slurmstepd, so the program never sees
// these unless we pass them on.
constexpr int kAlwaysForwarded[] = {SIGTSTP, SIGCONT, SIGTERM, SIGINT, SIGHUP, SIGQUIT};

}  // namespace

int Supervisor::take_signals() {
  sigset_t handled;
  sigemptyset(&handled);
  for (int s : kAlwaysForwarded) sigaddset(&handled, s);
  for (int s : o_.signals.signals()) sigaddset(&handled, s);
  sigaddset(&handled, SIGCHLD);
  if (o_.requeue_signal) sigaddset(&handled, o_.requeue_signal);
  ::sigprocmask(SIG_BLOCK, &handled, &old_mask_);
  sfd_ = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);  // a signal taken elsewhere never blocks the loop
  if (sfd_ >= 0) return 0;
  say(std::string("error: signalfd: ") + std::strerror(errno));
  return 1;
}

int Supervisor::open_watchdog() {
  if (o_.watchdog_file.empty()) return 0;
  Status st = Watchdog::open(o_.watchdog_file, &watchdog_);
  if (!st.ok()) {
    say("error: " + st.message());
    return 2;
  }
  watchdog_->set_kill_after(std::chrono::milliseconds(static_cast<int64_t>(o_.watchdog_kill_after * 1000)));
  // FileTimerClient users read TORCHELASTIC_TIMER_FILE (as under torchrun); hydro::WatchdogClient
  // reads HYDRO_WATCHDOG_FILE.
  ::setenv("HYDRO_WATCHDOG_FILE", o_.watchdog_file.c_str(), 1);
  ::setenv("TORCHELASTIC_TIMER_FILE", o_.watchdog_file.c_str(), 1);
  say("watchdog: timers are read from " + o_.watchdog_file);
  return 0;
}

int Supervisor::start() {
  if (int rc = take_signals()) return rc;
  // The program's processes whose parent ends become hydro-launch's children (end_orphans).
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    say(std::string("warning: PR_SET_CHILD_SUBREAPER: ") + std::strerror(errno) +
        "; processes left by the program are not ended with it");
  // Not the program's: what a batch script that exec'd hydro-launch had started (its `tee`).
  not_the_programs_ = children_of(::getpid());
  if (int rc = open_watchdog()) return rc;
  if (std::string error; !reports_.open(&error))
    say("warning: " + error + "; a program's workers without the readiness pipe (torchrun's) cannot report");
  if (int rc = launch()) return rc;
  if (o_.time_limit_margin > 0) {
    const char* job = std::getenv("SLURM_JOB_ID");
    if (job && *job)
      time_limit_ = std::make_unique<TimeLimitWatch>(o_.time_limit_margin,
                                                     TimeLimitWatch::from_scontrol(o_.scontrol, job, say), say);
    else
      say("--time-limit-margin: not in a Slurm job (no SLURM_JOB_ID); no time limit to watch");
  }
  return 0;
}

int Supervisor::restart(int generation) {
  pipe_.close();
  reports_.reset();
  awaiting_ready_ = true;
  exit_held_ = exit_sent_ = launcher_stopped_ = false;
  hang_.clear();
  status_ = 0;
  ::setenv("HYDRO_RESTART_GENERATION", std::to_string(generation).c_str(), 1);
  return launch();
}

int Supervisor::launch() {
  if (!prepare_resume(o_, &resumed_step_)) return 2;
  int write_end = -1;
  std::string error;
  if (!pipe_.open(&write_end, &error)) {
    say("error: " + error);
    return 1;
  }
  child_ = spawn(o_.command, old_mask_, held_signals(o_.signals), write_end);
  if (child_ > 0) ::setpgid(child_, child_);  // as the child does: its group exists for a kill at once
  ::close(write_end);
  ready_deadline_ = Steady::now() + std::chrono::seconds(kReadyWaitSeconds);
  if (child_ < 0) {
    say(std::string("error: fork: ") + std::strerror(errno));
    return 1;
  }
  say("started " + o_.command[0] + " as pid " + std::to_string(child_));
  if (watchdog_) watchdog_->set_child(child_);
  return 0;
}

// The soonest of the watchdog's next expiry, the time limit's next check and the readiness
// deadline of a held checkpoint-and-exit; -1 = none.
int Supervisor::poll_timeout_ms() const {
  int timeout = watchdog_ ? watchdog_->poll_timeout_ms(Watchdog::Clock::now()) : -1;
  auto sooner = [&timeout](int t) {
    if (t >= 0 && (timeout < 0 || t < timeout)) timeout = t;
  };
  if (time_limit_) sooner(time_limit_->poll_timeout_ms(std::time(nullptr)));  // EndTime is wall-clock
  if (exit_held_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ready_deadline_ - Steady::now()).count();
    sooner(static_cast<int>(std::max<int64_t>(0, left)));
  }
  return timeout;
}

void Supervisor::run_until_exit() {
  for (;;) {
    struct pollfd fds[5] = {{sfd_, POLLIN, 0},
                            {watchdog_ ? watchdog_->fd() : -1, POLLIN, 0},
                            {pipe_.fd(), POLLIN, 0},
                            {group_ ? group_->fd() : -1, POLLIN, 0},
                            {reports_.fd(), POLLIN, 0}};
    int r = ::poll(fds, 5, poll_timeout_ms());
    if (r < 0 && errno != EINTR) return kill_program(std::string("poll: ") + std::strerror(errno));
    if (watchdog_) {
      if (r > 0 && (fds[1].revents & POLLIN)) watchdog_->read_requests();
      for (const auto& killed : watchdog_->check(Watchdog::Clock::now()))
        if (hang_.empty()) hang_ = killed;
    }
    if (r > 0 && ((fds[2].revents & (POLLIN | POLLHUP | POLLERR)) || (fds[4].revents & POLLIN))) on_runtime_pipe();
    if (exit_held_ && Steady::now() >= ready_deadline_) on_ready_deadline();
    if (time_limit_ && time_limit_->check(std::time(nullptr)))
      ask_exit("time limit: --time-limit-margin " + std::to_string(o_.time_limit_margin) + " s before the job's end");
    if (r > 0 && (fds[3].revents & POLLIN)) on_group_call();
    if (r > 0 && (fds[0].revents & POLLIN) && on_signal()) return;
  }
}

// Another task called the next generation: this task's program (training on, or waiting for the
// failed rank in a collective) ends now, so that every task's starts again together.
void Supervisor::on_group_call() {
  say("the next generation was called (" + group_->read_call() + "): killing this task's program (pid " +
      std::to_string(child_) + ") to start it again with every task's");
  kill_tree();
}

bool Supervisor::on_signal() {
  struct signalfd_siginfo si;
  ssize_t n = ::read(sfd_, &si, sizeof si);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
  if (n != sizeof si) {
    kill_program(std::string("reading signals: ") + std::strerror(errno));
    return true;
  }
  int sig = static_cast<int>(si.ssi_signo);
  if (sig == SIGCHLD) {
    if (!reap_children()) return false;
    end_orphans();
    settle_teardown_race();
    settle_workers_exit();
    return true;
  }
  if (o_.requeue_signal && sig == o_.requeue_signal) {
    ask_exit(signal_name(sig));
    return false;
  }
  if (sig == SIGTERM) terminating_ = true;
  on_pause_or_resume(sig);
  signal_program(sig);
  return false;
}

// A signal for the program: to its process, and to its launcher's workers (session_workers) if it
// has any. SIGTERM and the checkpoint-and-exit go to the workers that reported up on the socket
// alone: their launcher would answer them by killing the workers before their checkpoint is
// written (torchrun, 30 s later); a process that never reported (a helper in a session of its
// own) never takes one. The launcher's own stop signals (SIGINT, SIGHUP, SIGQUIT) go to it alone:
// it stops its workers. A program whose own runtime said up or closed on the pipe is the training
// process itself: no workers are looked for (the walk costs about 10 us per process on the node).
void Supervisor::signal_program(int sig) {
  const bool trains = program_trains();
  const bool exit = sig == SIGTERM || sig == exit_signal_, stop = sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
  std::vector<pid_t> workers;
  if (exit && !trains) workers = reports_.open_workers();
  if (!exit && !stop && !trains) workers = session_workers(child_);
  std::string whom;
  if (!exit || workers.empty()) {
    ::kill(child_, sig);
    whom = "pid " + std::to_string(child_);
  }
  for (pid_t w : workers) {
    ::kill(w, sig);
    whom += (whom.empty() ? "its worker pid " : ", worker ") + std::to_string(w);
  }
  say("forwarding " + signal_name(sig) + " to " + whom);
}

// A pause (SIGTSTP, the map's pause signal) holds the watchdog's timers, and is held for the
// workers that come up before a resume (read_reports); a resume (SIGCONT, the map's resume signal)
// lets the timers run again, later by the time paused.
void Supervisor::on_pause_or_resume(int sig) {
  Action a = Action::pause;
  const bool mapped = o_.signals.lookup(sig, &a);
  const bool pause = sig == SIGTSTP || (mapped && a == Action::pause);
  const bool resume = sig == SIGCONT || (mapped && a == Action::resume);
  if (pause) held_pause_ = sig;
  if (resume) held_pause_ = 0;
  if (watchdog_ && pause) watchdog_->hold(Watchdog::Clock::now());
  if (watchdog_ && resume) watchdog_->release(Watchdog::Clock::now());
}

// SIGKILL to the program's process group and to its workers' (taken first: once the program is
// gone, they are no longer its descendants).
void Supervisor::kill_tree() {
  const std::vector<pid_t> workers = session_workers(child_);
  ::kill(-child_, SIGKILL);
  for (pid_t w : workers) ::kill(-w, SIGKILL);
}

void Supervisor::kill_program(const std::string& why) {
  say("error: " + why + "; killing the program");
  kill_tree();
  while (::waitpid(child_, &status_, 0) < 0 && errno == EINTR) {
  }
  end_orphans();
}

// Reaps every child that has ended: the program, and the program's processes that hydro-launch,
// their subreaper, took in when their parent ended. True once the program has.
bool Supervisor::reap_children() {
  bool ended = false;
  int status = 0;
  for (pid_t p; (p = ::waitpid(-1, &status, WNOHANG)) > 0;) {
    if (p != child_) continue;
    status_ = status;
    ended = true;
  }
  return ended;
}

// hydro-launch's children now but those it had before the program: the program's processes that
// it took in as their subreaper, and zombies of them.
std::vector<pid_t> Supervisor::programs_children() const {
  std::vector<pid_t> pids = children_of(::getpid());
  pids.erase(std::remove_if(pids.begin(), pids.end(),
                            [this](pid_t p) {
                              return std::find(not_the_programs_.begin(), not_the_programs_.end(), p) !=
                                     not_the_programs_.end();
                            }),
             pids.end());
  return pids;
}

// The program's processes still running once it has ended: a launcher in it that was killed on its
// own (torchrun, by the OOM killer) leaves its workers, in sessions of their own, training on and
// holding their devices. hydro-launch is the subreaper of its program's tree (start()), so they are
// its children now: they are killed, with their process groups, and reaped before the program
// starts again or hydro-launch ends. Bounded: one that never dies (in the kernel's D state) is
// named and left to Slurm's end of the step.
void Supervisor::end_orphans() {
  std::vector<pid_t> killed;
  const auto named = [&killed] {
    std::string s;
    for (pid_t p : killed) s += (s.empty() ? " " : ", ") + std::to_string(p);
    return s;
  };
  const auto give_up = Steady::now() + std::chrono::seconds(10);
  for (std::vector<pid_t> left = programs_children(); !left.empty(); left = programs_children()) {
    for (pid_t p : left) {
      if (std::find(killed.begin(), killed.end(), p) == killed.end()) killed.push_back(p);
      ::kill(-p, SIGKILL);  // its group: its own helpers (a worker's DataLoader workers)
      ::kill(p, SIGKILL);
    }
    if (Steady::now() >= give_up) {
      say("warning: the program's processes" + named() + " did not end after SIGKILL; left to Slurm");
      return;
    }
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    ::usleep(1000);
  }
  if (!killed.empty()) say("the program ended and left processes running; killed:" + named());
}

void Supervisor::close_fds() {
  watchdog_.reset();  // removes the FIFO if hydro-launch created it
  pipe_.close();
  if (sfd_ >= 0) ::close(sfd_);
  sfd_ = -1;
}

// Runs the program until it ends, and again in this allocation while --restarts allows (generation
// 1, 2, ...), with every task of the step when it has several. 0 once it has ended for good, else
// hydro-launch's exit code.
static int run_generations(const Options& o, Supervisor& supervisor) {
  const StepTasks tasks = open_step_tasks(o);
  supervisor.set_group(tasks.group.get());
  if (int rc = supervisor.start()) return rc;
  for (int done = 0;; ++done) {
    supervisor.run_until_exit();
    RunEnd end{supervisor.wait_status(), supervisor.terminating(), supervisor.hang(), supervisor.resumed_step(),
               supervisor.exit_asked()};
    if (!next_generation(o, end, done, tasks)) return 0;
    if (int rc = supervisor.restart(done + 1)) return rc;
  }
}

// Requeues this job with `scontrol` (decided in d). Where that fails (no scontrol in a container,
// or one that cannot reach slurmctld), exits kExitRequeueJob instead, which the host turns into the
// requeue: hydro's SPANK plugin in slurmstepd, or slurm.conf's RequeueExit.
static int requeue(const Options& o, const ExitDecision& d) {
  const std::string job_id = std::getenv("SLURM_JOB_ID");
  int rc = 0;
  switch (requeue_job(o.scontrol, job_id, d.restarts, &rc)) {
    case Requeue::done: say("job " + job_id + " requeued"); return d.exit_code;
    case Requeue::done_already:
      say("job " + job_id + " requeued already (by another task's hydro-launch, or by Slurm)");
      return d.exit_code;
    case Requeue::failed: break;
  }
  say("`" + o.scontrol + " requeue " + job_id + "` failed with status " + std::to_string(rc) +
      (rc == 127 ? " (no scontrol here: in a container?)" : "") + "; exiting " + std::to_string(kExitRequeueJob) +
      " for the host to requeue the job: hydro's SPANK plugin does, or slurm.conf's RequeueExit=" +
      std::to_string(kExitRequeueJob) + " (the job must be requeueable: sbatch --requeue)");
  return kExitRequeueJob;
}

int run(const Options& o) {
  Supervisor supervisor(o);
  if (int rc = run_generations(o, supervisor)) return rc;
  supervisor.close_fds();
  ExitDecision d = decide_after_run(o, supervisor.wait_status(), supervisor.terminating(), supervisor.hang());
  say(d.why);
  return d.requeue ? requeue(o, d) : d.exit_code;
}

}  // namespace hydro::launcher
