// Whole hydro-launch processes around workers that arm timers through hydro::WatchdogClient and
// through torch's FileTimerClient.
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
#include "watchdog_helpers.h"

namespace hydro {
namespace {

using launcher::Watchdog;
using namespace hydro::test;

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
  const std::string script =
      std::string("echo garbage > \"$HYDRO_WATCHDOG_FILE\"; exec ") + HYDRO_WATCHDOG_WORKER_BIN + " hang " + t.path;
  LaunchResult r = launch({"--watchdog-file", fifo, "--scontrol", fake_scontrol(t.path), "--", "/bin/sh", "-c", script},
                          {"SLURM_JOB_ID=4242", "SLURM_RESTART_COUNT=1"}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), kExitRequeue) << r.err;
  expect_group_killed(t.path, r.err);
  const std::string worker = slurp(t.path + "/worker.pid");
  EXPECT_TRUE(has(r.err, "warning: watchdog request is not a JSON object: garbage (ignored)")) << r.err;
  EXPECT_TRUE(has(r.err, "watchdog expired: pid " + worker + " scope 'train step' (")) << r.err;
  EXPECT_TRUE(has(r.err, "sending SIGKILL to its process group " + worker)) << r.err;
  EXPECT_TRUE(
      has(r.err, "watchdog expired: pid " + worker +
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
  EXPECT_TRUE(has(r.err,
                  "hung and was killed; not requeueing: the job has been restarted 2 times "
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
  EXPECT_TRUE(has(
      r.err, "error: --watchdog-file: " + link + " is a symbolic link; give a path that does not exist or is a FIFO"))
      << r.err;

  if (::geteuid() == 0) {
    const std::string theirs = t.path + "/theirs";
    ASSERT_EQ(::mkfifo(theirs.c_str(), 0600), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    r = launch({"--watchdog-file", theirs, "--", "true"}, {"SLURM_JOB_ID="}, t.path);
    EXPECT_EQ(WEXITSTATUS(r.status), 2);
    EXPECT_TRUE(has(r.err, "error: --watchdog-file: " + theirs + " is owned by uid 65534, not by you (uid 0)"))
        << r.err;
  }

  // An existing FIFO is used, and left in place.
  r = launch({"--watchdog-file", fifo, "--", "true"}, {"SLURM_JOB_ID="}, t.path);
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// The build's interpreter (HYDRO_PYTHON) with torch: the worker uses
// torch.distributed.elastic.timer.FileTimerClient unchanged.
void require_python_torch() {
  int rc = std::system(
      (std::string(HYDRO_TEST_PYTHON) + " -c 'import torch.distributed.elastic.timer' 2>/dev/null").c_str());
  ASSERT_EQ(rc, 0) << "these tests need " << HYDRO_TEST_PYTHON << " with torch: run scripts/setup";
}

TEST(WatchdogLaunch, TorchFileTimerClientHangIsKilled) {
  require_python_torch();
  if (HasFatalFailure()) return;
  test::TempDir t;
  LaunchResult r =
      launch({"--watchdog-file", t.path + "/timers", "--", HYDRO_TEST_PYTHON, HYDRO_WATCHDOG_WORKER_PY, "hang", t.path},
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
  LaunchResult r = launch(
      {"--watchdog-file", t.path + "/timers", "--", HYDRO_TEST_PYTHON, HYDRO_WATCHDOG_WORKER_PY, "finish", t.path},
      {"SLURM_JOB_ID="}, t.path);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(slurp(t.path + "/done"), "done");
  EXPECT_FALSE(has(r.err, "watchdog expired")) << r.err;
  EXPECT_FALSE(has(r.err, "warning")) << "torch's requests must parse cleanly: " << r.err;
}

}  // namespace
}  // namespace hydro
