// hydro-launch's report socket (launcher/worker_reports.h) with the runtime's side of it
// (hydro/launch_ready.h): what a worker says when its launcher closed the readiness pipe (torchrun),
// who is heard, and which processes are a program's workers (process_info.h); hydro-launch ends
// the workers a program that died left running.
#include "worker_reports.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "fault_fs.h"
#include "hydro/launch_ready.h"
#include "process_info.h"
#include "spawn_launcher.h"
#include "watchdog_helpers.h"

namespace hydro::launcher {
namespace {

using State = RuntimePipe::State;

// Runs `say` in a forked child, as a worker whose launcher closed the pipe (the variables name a
// descriptor it does not have) and passed the socket; returns the child's pid once it has ended.
template <class Say>
pid_t worker(const char* local_world_size, Say say) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv(kLaunchReadyEnv, "999", 1);
    ::setenv(kLaunchReadyInoEnv, "1", 1);
    ::setenv("LOCAL_WORLD_SIZE", local_world_size, 1);
    say();
    ::_exit(0);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_EQ(status, 0);
  return pid;
}

TEST(WorkerReports, AWorkerWithoutThePipeSaysUpExitingAndClosedOnTheSocket) {
  WorkerReports reports;
  std::string error;
  ASSERT_TRUE(reports.open(&error)) << error;
  ASSERT_NE(std::getenv(kLaunchSocketEnv), nullptr);
  std::vector<pid_t> program;
  auto ours = [&program](pid_t p) { return std::count(program.begin(), program.end(), p) > 0; };
  program.push_back(worker("2", [] {
    tell_launcher_ready();
    tell_launcher_exiting();
    tell_launcher_closed();
  }));
  EXPECT_EQ(reports.read_available(ours), "");
  EXPECT_EQ(reports.state(), State::starting);  // 1 of its LOCAL_WORLD_SIZE 2
  EXPECT_EQ(reports.exiting(), 1);
  EXPECT_EQ(reports.take_new_up(), std::vector<pid_t>{program[0]});  // once: a pause held is sent it
  EXPECT_TRUE(reports.take_new_up().empty());
  program.push_back(worker("2", [] { tell_launcher_ready(); }));
  reports.read_available(ours);
  EXPECT_EQ(reports.state(), State::up);
  EXPECT_EQ(reports.up(), 2);
  program.push_back(worker("2", [] {}));  // no runtime: says nothing
  reports.take(program[1], std::string(1, kRuntimeClosed));
  EXPECT_EQ(reports.state(), State::closed);
  reports.reset();
  EXPECT_EQ(reports.state(), State::starting);
  EXPECT_EQ(reports.exiting(), 0);
  ::unsetenv(kLaunchSocketEnv);
}

// Another user on the node cannot send at all (the socket's directory is the job user's, 0700),
// and a process of the same user outside the program is not heard. The directory goes with the
// WorkerReports.
TEST(WorkerReports, NeverHearsAnotherUserNorAProcessOutsideTheProgram) {
  ASSERT_EQ(::geteuid(), 0u) << "this test needs root, to send as a second uid";
  std::string dir;
  {
    WorkerReports reports;
    std::string error;
    ASSERT_TRUE(reports.open(&error)) << error;
    const std::string path = std::getenv(kLaunchSocketEnv);
    dir = path.substr(0, path.rfind('/'));
    struct stat st;
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    const pid_t stranger = worker("1", [] {
      if (::setuid(65534) != 0) ::_exit(3);
      tell_launcher_ready();
    });
    const pid_t outsider = worker("1", [] { tell_launcher_ready(); });
    const std::string dropped = reports.read_available([stranger](pid_t p) { return p == stranger; });
    EXPECT_NE(dropped.find(std::to_string(outsider)), std::string::npos) << dropped;
    EXPECT_EQ(reports.up(), 0);
    EXPECT_EQ(reports.state(), State::starting);
    ::unsetenv(kLaunchSocketEnv);
  }
  EXPECT_NE(::access(dir.c_str(), F_OK), 0);
}

// A hydro-launch killed with SIGKILL (a job killed while suspended) leaves its directory: the next
// one of the same user on the node removes it, by the dead pid in its name, and leaves a live
// one's.
TEST(WorkerReports, ADirectoryLeftByAKilledLauncherIsRemovedByTheNext) {
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string stale = "/tmp/hydro-launch." + std::to_string(dead) + ".test01";
  const std::string live = "/tmp/hydro-launch." + std::to_string(::getpid()) + ".test02";
  for (const std::string& d : {stale, live}) {
    ASSERT_EQ(::mkdir(d.c_str(), 0700), 0) << d;
    ASSERT_EQ(::close(::open((d + "/reports").c_str(), O_CREAT | O_WRONLY, 0600)), 0);
  }
  ::setenv("TMPDIR", "/tmp", 1);
  {
    WorkerReports reports;
    std::string error;
    ASSERT_TRUE(reports.open(&error)) << error;
    ::unsetenv(kLaunchSocketEnv);
  }
  EXPECT_NE(::access(stale.c_str(), F_OK), 0);
  EXPECT_EQ(::access(live.c_str(), F_OK), 0);
  ::unlink((live + "/reports").c_str());
  ::rmdir(live.c_str());
}

// torchrun reaps a worker that said it checkpointed to exit before hydro-launch reads that: the
// worker is out of the tree by then, and is still heard, having reported before.
TEST(WorkerReports, AWorkerHeardBeforeIsHeardOnceItHasExited) {
  WorkerReports reports;
  std::string error;
  ASSERT_TRUE(reports.open(&error)) << error;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv(kLaunchReadyEnv, "999", 1);
    ::setenv(kLaunchReadyInoEnv, "1", 1);
    tell_launcher_ready();
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    tell_launcher_exiting();
    ::_exit(0);
  }
  for (int i = 0; i < 1000 && reports.up() == 0; ++i) {
    reports.read_available([pid](pid_t p) { return p == pid; });
    ::usleep(1000);
  }
  ASSERT_EQ(reports.up(), 1);
  ASSERT_EQ(::write(go[1], "x", 1), 1);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  EXPECT_EQ(reports.read_available([](pid_t) { return false; }), "");
  EXPECT_EQ(reports.exiting(), 1);
  ::close(go[0]);
  ::close(go[1]);
  ::unsetenv(kLaunchSocketEnv);
}

// A launcher's workers lead sessions of their own (torchrun's start_new_session); the program's
// other descendants (a DataLoader's workers) do not, and are not among them.
TEST(SessionWorkers, AreTheDescendantsThatLeadASessionOfTheirOwn) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t program = ::fork();
  if (program == 0) {
    ::setpgid(0, 0);
    for (bool own_session : {true, false}) {
      if (::fork() == 0) {
        if (own_session) ::setsid();
        char c = own_session ? 's' : 'p';
        if (::write(ready[1], &c, 1) != 1) ::_exit(1);
        ::pause();
        ::_exit(0);
      }
    }
    ::pause();
    ::_exit(0);
  }
  char got[2];
  ASSERT_EQ(::read(ready[0], got, 1), 1);
  ASSERT_EQ(::read(ready[0], got + 1, 1), 1);
  const std::vector<pid_t> workers = session_workers(program);
  ASSERT_EQ(workers.size(), 1u);
  const auto leader = read_proc_stat(workers[0]);
  ASSERT_TRUE(leader);
  EXPECT_EQ(leader->ppid, program);
  EXPECT_EQ(leader->sid, workers[0]);
  EXPECT_TRUE(session_workers(workers[0]).empty());
  ::kill(-workers[0], SIGKILL);
  ::kill(-program, SIGKILL);
  ::waitpid(program, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

// A launcher in the program killed on its own (torchrun, by the OOM killer) leaves its workers, in
// sessions of their own, running: hydro-launch, their subreaper, kills and reaps them before it
// ends, so that no worker trains on beside the program's next run.
TEST(Launcher, KillsTheWorkersThatAProgramKilledOnItsOwnLeftRunning) {
  test::TempDir t;
  const std::string pid_file = t.path + "/worker";
  const std::string script = "setsid sh -c 'echo $$ > " + pid_file + ".tmp; mv " + pid_file + ".tmp " + pid_file +
                             "; exec sleep 600' & while [ ! -s " + pid_file + " ]; do sleep 0.01; done; kill -9 $$";
  test::LaunchResult r =
      test::run_launcher({"--", "/bin/sh", "-c", script}, {"SLURM_JOB_ID=", "HYDRO_PAUSE=off"}, t.path);
  const pid_t worker = static_cast<pid_t>(std::atol(test::slurp(pid_file).c_str()));
  ASSERT_GT(worker, 0) << r.err;
  const bool alive = ::kill(worker, 0) == 0;
  if (alive) ::kill(worker, SIGKILL);
  EXPECT_FALSE(alive) << "the worker outlived hydro-launch\n" << r.err;
  EXPECT_NE(r.err.find("the program ended and left processes running; killed: " + std::to_string(worker)),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 128 + SIGKILL) << r.err;
}

// What a batch script that exec'd hydro-launch had started before (the `tee` of its output) is a
// child of hydro-launch but not the program's: it is left running.
TEST(Launcher, LeavesWhatItsShellHadStartedBeforeItRunning) {
  test::TempDir t;
  const std::string pid_file = t.path + "/before";
  const std::string script = "sleep 600 & echo $! > " + pid_file + "; exec " + HYDRO_LAUNCH_BIN + " -- /bin/true 2>" +
                             t.path + "/launcher.err";
  const pid_t shell = ::fork();
  if (shell == 0) {
    ::setenv("SLURM_JOB_ID", "", 1);
    ::setenv("HYDRO_PAUSE", "off", 1);
    ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(shell, &status, 0), shell);
  const pid_t before = static_cast<pid_t>(std::atol(test::slurp(pid_file).c_str()));
  ASSERT_GT(before, 0);
  const bool alive = ::kill(before, 0) == 0;
  ::kill(before, SIGKILL);
  EXPECT_TRUE(alive) << test::slurp(t.path + "/launcher.err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::slurp(t.path + "/launcher.err");
}

}  // namespace
}  // namespace hydro::launcher
