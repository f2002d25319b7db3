// hydro-launch's watchdog: the server on its own, then whole hydro-launch processes around workers
// that arm timers through hydro::WatchdogClient and through torch's FileTimerClient.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fault_fs.h"
#include "spawn_launcher.h"
#include "hydro/exit_codes.h"
#include "hydro/timer_table.h"
#include "process_info.h"
#include "watchdog.h"

namespace hydro {
namespace {

using launcher::read_proc_stat;
using launcher::Watchdog;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Gone, or a zombie nobody has reaped yet (an orphan's new parent may never reap it here).
bool dead(pid_t pid) {
  auto s = read_proc_stat(pid);
  return !s || s->state == 'Z' || s->state == 'X';
}

pid_t start_sleeper(bool own_group) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (own_group) ::setpgid(0, 0);
    ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (own_group) ::setpgid(pid, pid);  // no race with the kill below
  return pid;
}

std::string request(pid_t pid, const std::string& scope, double expiration, int signal = SIGKILL) {
  TimerRequest r;
  r.pid = pid;
  r.scope_id = scope;
  r.expiration_time = expiration;
  r.signal = signal;
  return format_timer_request(r);
}

TEST(ProcStat, ParsesFieldsAfterTheLastParenthesis) {
  launcher::ProcStat s;
  ASSERT_TRUE(launcher::parse_proc_stat(
      "4242 (a) b (c)) S 17 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200", &s));
  EXPECT_EQ(s.pid, 4242);
  EXPECT_EQ(s.state, 'S');
  EXPECT_EQ(s.ppid, 17);
  EXPECT_EQ(s.pgid, 4240);
  EXPECT_EQ(s.start_time, 987654u);
  EXPECT_FALSE(launcher::parse_proc_stat("4242 (cut short) S 1 2", &s));
  EXPECT_FALSE(launcher::parse_proc_stat("", &s));
  auto self = read_proc_stat(::getpid());
  ASSERT_TRUE(self);
  EXPECT_EQ(self->pgid, ::getpgrp());
  EXPECT_EQ(self->ppid, ::getppid());
}

TEST(WatchdogServer, KillsTheProcessGroupOnlyIfThePidIsStillTheProcessThatArmedIt) {
  test::TempDir t;
  std::unique_ptr<Watchdog> w;
  ASSERT_TRUE(Watchdog::open(t.path + "/timers", &w).ok());
  pid_t child = start_sleeper(/*own_group=*/true);
  w->set_child(child);
  auto now = Watchdog::Clock::now();
  w->handle_line(request(child, "step", wall_now() - 2), now, wall_now());
  ASSERT_EQ(w->timers().size(), 1u);
  EXPECT_EQ(w->poll_timeout_ms(now), 0);

  // Pretend the pid was reused: the process now has another start time than the one that armed it.
  auto armed = read_proc_stat(child);
  ASSERT_TRUE(armed);
  TimerTable::Timer reused;
  reused.pid = child;
  reused.scope_id = "step";
  reused.deadline = now;
  reused.signal = SIGKILL;
  reused.start_time = armed->start_time + 1;
  w->timers().arm(reused);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(w->check(now).empty());
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("watchdog expired: pid " + std::to_string(child) + " scope 'step' ("), std::string::npos) << log;
  EXPECT_NE(log.find("), but pid " + std::to_string(child) +
                     " has exited since (or is another process now): nothing to kill"),
            std::string::npos)
      << log;
  EXPECT_FALSE(dead(child)) << "a reused pid must not be killed";

  w->handle_line(request(child, "step", wall_now() - 2), now, wall_now());
  testing::internal::CaptureStderr();
  auto killed = w->check(now);
  log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(killed, std::vector<std::string>{"pid " + std::to_string(child) + " scope 'step'"});
  EXPECT_NE(log.find("sending SIGKILL to its process group " + std::to_string(child)), std::string::npos) << log;
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(w->timers().empty());
  EXPECT_EQ(w->poll_timeout_ms(now), -1);
}

// A sleeper in its own process group that ignores SIGTERM (SIG_IGN survives exec).
pid_t start_term_ignoring_sleeper() {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGTERM, SIG_IGN);
    ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  return pid;
}

TEST(WatchdogServer, AWorkerThatOutlivesACatchableSignalGetsSigkillAfterTheGrace) {
  test::TempDir t;
  std::unique_ptr<Watchdog> w;
  ASSERT_TRUE(Watchdog::open(t.path + "/timers", &w).ok());
  w->set_kill_after(std::chrono::seconds(30));
  pid_t child = start_term_ignoring_sleeper();
  w->set_child(child);
  // Wait until it has exec'd sleep: SIG_IGN is set by then.
  for (int i = 0; i < 5000 && slurp("/proc/" + std::to_string(child) + "/comm") != "sleep\n"; ++i) ::usleep(1000);
  auto now = Watchdog::Clock::now();
  w->handle_line(request(child, "step", wall_now() - 1, SIGTERM), now, wall_now());
  testing::internal::CaptureStderr();
  EXPECT_EQ(w->check(now).size(), 1u);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("sending SIGTERM to its process group " + std::to_string(child)), std::string::npos) << log;
  ::usleep(20000);
  EXPECT_FALSE(dead(child)) << "it ignores SIGTERM";
  EXPECT_EQ(w->poll_timeout_ms(now), 30000) << "the escalation is the next deadline";

  testing::internal::CaptureStderr();
  EXPECT_TRUE(w->check(now + std::chrono::seconds(29)).empty());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  testing::internal::CaptureStderr();
  EXPECT_TRUE(w->check(now + std::chrono::seconds(30)).empty());
  log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("watchdog: pid " + std::to_string(child) +
                     " scope 'step' still runs 30.0 s after SIGTERM; sending SIGKILL to its process group " +
                     std::to_string(child)),
            std::string::npos)
      << log;
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(w->poll_timeout_ms(now), -1);
}

TEST(WatchdogServer, AWorkerThatEndsOnTheCatchableSignalIsNotKilledAgain) {
  test::TempDir t;
  std::unique_ptr<Watchdog> w;
  ASSERT_TRUE(Watchdog::open(t.path + "/timers", &w).ok());
  w->set_kill_after(std::chrono::seconds(30));
  pid_t child = start_sleeper(/*own_group=*/true);
  w->set_child(child);
  auto now = Watchdog::Clock::now();
  w->handle_line(request(child, "step", wall_now() - 1, SIGTERM), now, wall_now());
  testing::internal::CaptureStderr();
  EXPECT_EQ(w->check(now).size(), 1u);
  (void)testing::internal::GetCapturedStderr();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(w->check(now + std::chrono::seconds(30)).empty());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "gone: nothing to escalate";
  EXPECT_EQ(w->poll_timeout_ms(now), -1);
}

TEST(WatchdogServer, IgnoresBadLinesReleasesAndProcessesThatAreNotOurs) {
  test::TempDir t;
  std::unique_ptr<Watchdog> w;
  ASSERT_TRUE(Watchdog::open(t.path + "/timers", &w).ok());
  pid_t child = start_sleeper(true);
  pid_t stranger = start_sleeper(true);
  w->set_child(child);
  auto now = Watchdog::Clock::now();
  testing::internal::CaptureStderr();
  w->handle_line("{\"version\": 1}", now, wall_now());
  w->handle_line(request(stranger, "theirs", wall_now() + 5), now, wall_now());
  w->handle_line(request(child, "ours", wall_now() + 5), now, wall_now());
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("warning: watchdog request: missing field 'pid': {\"version\": 1} (ignored)"), std::string::npos)
      << log;
  EXPECT_NE(log.find("warning: watchdog: ignoring timer 'theirs' of pid " + std::to_string(stranger) +
                     ": it is not in hydro-launch's process tree (process group " + std::to_string(child) +
                     " or its descendants), so hydro-launch will not kill it"),
            std::string::npos)
      << log;
  EXPECT_EQ(w->timers().size(), 1u);
  int ms = w->poll_timeout_ms(now);
  EXPECT_GT(ms, 0);
  EXPECT_LE(ms, 30000);
  w->handle_line(request(child, "ours", -1, 0), now, wall_now());
  EXPECT_TRUE(w->timers().empty()) << "a release disarms";
  EXPECT_TRUE(w->check(now + std::chrono::seconds(60)).empty());
  for (pid_t p : {child, stranger}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
}

// hydro-launch around `command`, with a guard: a launcher still running after 60 s fails the test.
struct LaunchResult {
  int status = -1;
  std::string err;
  bool timed_out = false;
};

LaunchResult launch(const std::vector<std::string>& args, const std::vector<std::string>& env, const std::string& dir) {
  std::string err_path = dir + "/launcher.err";
  pid_t pid = test::spawn_launcher(args, env, err_path);
  LaunchResult r;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::waitpid(pid, &r.status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      r.timed_out = true;
      std::string worker = slurp(dir + "/worker.pid");
      if (!worker.empty()) ::kill(-std::stoi(worker), SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &r.status, 0);
      break;
    }
    ::usleep(10 * 1000);
  }
  r.err = slurp(err_path);
  return r;
}

std::string fake_scontrol(const std::string& dir) {
  const std::string path = dir + "/scontrol";
  {
    std::ofstream f(path);
    f << "#!/bin/sh\necho \"$@\" > " << dir << "/scontrol.args\n";
  }
  ::chmod(path.c_str(), 0755);
  return path;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The worker and its `sleep 1000` child (DataLoader-like, same process group) are both dead.
void expect_group_killed(const std::string& dir, const std::string& err) {
  std::string worker = slurp(dir + "/worker.pid"), sleeper = slurp(dir + "/sleeper.pid");
  ASSERT_FALSE(worker.empty()) << err;
  ASSERT_FALSE(sleeper.empty()) << err;
  EXPECT_TRUE(dead(std::stoi(worker)));
  EXPECT_TRUE(test::eventually([&] { return dead(std::stoi(sleeper)); })) << "the worker's child survived: " << err;
  if (!dead(std::stoi(sleeper))) ::kill(std::stoi(sleeper), SIGKILL);  // it would hold the test's stdout
  EXPECT_TRUE(has(err, "watchdog expired: pid " + worker + " scope ")) << err;
  EXPECT_TRUE(has(err, "sending SIGKILL to its process group ")) << err;
}

TEST(WatchdogLaunch, KillsTheHungWorkersWholeProcessGroupAndRequeues) {
  test::TempDir t;
  const std::string fifo = t.path + "/timers";
  // A bad line first: the server logs it and keeps serving.
  const std::string script = std::string("echo garbage > \"$HYDRO_WATCHDOG_FILE\"; exec ") + HYDRO_WATCHDOG_WORKER_BIN +
                             " hang " + t.path;
  LaunchResult r = launch({"--watchdog-file", fifo, "--scontrol", fake_scontrol(t.path), "--", "/bin/sh", "-c", script},
                          {"SLURM_JOB_ID=4242", "SLURM_RESTART_COUNT=1"}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  expect_group_killed(t.path, r.err);
  const std::string worker = slurp(t.path + "/worker.pid");
  EXPECT_TRUE(has(r.err, "warning: watchdog request is not a JSON object: garbage (ignored)")) << r.err;
  EXPECT_TRUE(has(r.err, "watchdog expired: pid " + worker + " scope 'train step' (")) << r.err;
  EXPECT_TRUE(has(r.err, "sending SIGKILL to its process group " + worker)) << r.err;
  EXPECT_TRUE(has(r.err, "watchdog expired: pid " + worker +
                             " scope 'train step' hung and was killed; requeueing the job (restart 2 of --max-restarts 3)"))
      << r.err;
  EXPECT_EQ(slurp(t.path + "/scontrol.args"), "requeue 4242\n");
  EXPECT_FALSE(posix_fs().exists(fifo)) << "hydro-launch removes the FIFO it created";
}

TEST(WatchdogLaunch, StopsRequeueingAfterMaxRestarts) {
  test::TempDir t;
  LaunchResult r = launch({"--watchdog-file", t.path + "/timers", "--max-restarts", "2", "--scontrol",
                           fake_scontrol(t.path), "--", HYDRO_WATCHDOG_WORKER_BIN, "hang", t.path},
                          {"SLURM_JOB_ID=4242", "SLURM_RESTART_COUNT=2"}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), kExitWatchdog) << r.err;
  expect_group_killed(t.path, r.err);
  EXPECT_TRUE(has(r.err, "hung and was killed; not requeueing: the job has been restarted 2 times "
                         "(SLURM_RESTART_COUNT) and --max-restarts is 2"))
      << r.err;
  EXPECT_FALSE(posix_fs().exists(t.path + "/scontrol.args"));
}

TEST(WatchdogLaunch, AWorkerThatDisarmsInTimeIsNotKilled) {
  test::TempDir t;
  LaunchResult r = launch({"--watchdog-file", t.path + "/timers", "--", HYDRO_WATCHDOG_WORKER_BIN, "disarm", t.path},
                          {"SLURM_JOB_ID="}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/done"), "done");
  EXPECT_FALSE(has(r.err, "watchdog expired")) << r.err;
  EXPECT_TRUE(has(r.err, "the program exited with status 0")) << r.err;
}

TEST(WatchdogLaunch, ExportsAPrivateFifoAndNeverKillsAProcessOutsideItsTree) {
  test::TempDir t;
  const std::string fifo = t.path + "/timers";
  pid_t stranger = start_sleeper(false);
  const std::string script =
      "echo \"$HYDRO_WATCHDOG_FILE|$TORCHELASTIC_TIMER_FILE|$(stat -c %a \"$HYDRO_WATCHDOG_FILE\")\" > " + t.path +
      "/seen; echo '" + request(stranger, "not mine", 1) + "' > \"$HYDRO_WATCHDOG_FILE\"; sleep 2";
  LaunchResult r = launch({"--watchdog-file", fifo, "--", "/bin/sh", "-c", script}, {"SLURM_JOB_ID="}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/seen"), fifo + "|" + fifo + "|600\n");
  EXPECT_TRUE(has(r.err, "warning: watchdog: ignoring timer 'not mine' of pid " + std::to_string(stranger) +
                             ": it is not in hydro-launch's process tree"))
      << r.err;
  EXPECT_FALSE(dead(stranger));
  ::kill(stranger, SIGKILL);
  ::waitpid(stranger, nullptr, 0);
}

TEST(WatchdogLaunch, BadWatchdogFileIsAClearError) {
  test::TempDir t;
  LaunchResult r = launch({"--watchdog-file", "rel/timers", "--", "true"}, {}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: --watchdog-file: 'rel/timers' must be an absolute path\n");
  r = launch({"--max-restarts", "-1", "--", "true"}, {}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_EQ(r.err, "hydro-launch: --max-restarts=-1 is out of range [0, 1000000]\n");

  const std::string file = t.path + "/regular";
  { std::ofstream(file) << "x"; }
  r = launch({"--watchdog-file", file, "--", "true"}, {"SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_TRUE(has(r.err, "error: --watchdog-file: " + file +
                             " exists and is not a FIFO; give a path that does not exist or is a FIFO"))
      << r.err;
  EXPECT_EQ(slurp(file), "x") << "never removed or replaced";

  const std::string fifo = t.path + "/fifo", link = t.path + "/link";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::symlink(fifo.c_str(), link.c_str()), 0);
  r = launch({"--watchdog-file", link, "--", "true"}, {"SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_TRUE(has(r.err, "error: --watchdog-file: " + link +
                             " is a symbolic link; give a path that does not exist or is a FIFO"))
      << r.err;

  if (::geteuid() == 0) {
    const std::string theirs = t.path + "/theirs";
    ASSERT_EQ(::mkfifo(theirs.c_str(), 0600), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    r = launch({"--watchdog-file", theirs, "--", "true"}, {"SLURM_JOB_ID="}, t.path);
    EXPECT_EQ(WEXITSTATUS(r.status), 2);
    EXPECT_TRUE(has(r.err, "error: --watchdog-file: " + theirs + " is owned by uid 65534, not by you (uid 0)")) << r.err;
  }

  // An existing FIFO is used, and left in place.
  r = launch({"--watchdog-file", fifo, "--", "true"}, {"SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// Debian's python3-torch: the worker uses torch.distributed.elastic.timer.FileTimerClient unchanged.
void require_python_torch() {
  int rc = std::system("/usr/bin/python3 -c 'import torch.distributed.elastic.timer' 2>/dev/null");
  ASSERT_EQ(rc, 0) << "these tests need Debian's python3-torch (/usr/bin/python3 with torch): "
                      "apt-get install python3-torch";
}

TEST(WatchdogLaunch, TorchFileTimerClientHangIsKilled) {
  require_python_torch();
  if (HasFatalFailure()) return;
  test::TempDir t;
  LaunchResult r = launch({"--watchdog-file", t.path + "/timers", "--", "/usr/bin/python3", HYDRO_WATCHDOG_WORKER_PY,
                           "hang", t.path},
                          {"SLURM_JOB_ID="}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  expect_group_killed(t.path, r.err);
  EXPECT_TRUE(has(r.err, "scope 'hung step' hung and was killed; not in a Slurm job, so nothing to requeue")) << r.err;
}

TEST(WatchdogLaunch, TorchFileTimerClientScopeThatEndsIsNotKilled) {
  require_python_torch();
  if (HasFatalFailure()) return;
  test::TempDir t;
  LaunchResult r = launch({"--watchdog-file", t.path + "/timers", "--", "/usr/bin/python3", HYDRO_WATCHDOG_WORKER_PY,
                           "finish", t.path},
                          {"SLURM_JOB_ID="}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/done"), "done");
  EXPECT_FALSE(has(r.err, "watchdog expired")) << r.err;
  EXPECT_FALSE(has(r.err, "warning")) << "torch's requests must parse cleanly: " << r.err;
}

}  // namespace
}  // namespace hydro
