// hydro-launch's watchdog FIFO as an attacker or an unlucky user meets it: a FIFO others can use,
// two hydro-launch on one path, a flood of requests, and the %t/%j escapes that give each task
// its own FIFO.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "fault_fs.h"
#include "hydro/timer_table.h"
#include "watchdog.h"

namespace hydro {
namespace {

using launcher::Watchdog;

TEST(WatchdogFifo, AFifoOtherUsersCanReadOrWriteIsRefused) {
  test::TempDir t;
  for (unsigned mode : {0666u, 0620u, 0604u, 0640u}) {
    const std::string fifo = t.path + "/fifo" + std::to_string(mode);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    ASSERT_EQ(::chmod(fifo.c_str(), mode), 0);
    std::unique_ptr<Watchdog> w;
    Status st = Watchdog::open(fifo, &w);
    EXPECT_FALSE(st.ok()) << std::oct << mode;
    char want[8];
    std::snprintf(want, sizeof want, "%04o", mode);
    EXPECT_EQ(st.message(), "--watchdog-file: " + fifo + " has mode " + want +
                                ": other users could arm or take its timers; chmod 600 it, or give a path that "
                                "does not exist");
    EXPECT_TRUE(posix_fs().exists(fifo)) << "never removed: it is the user's";
  }
}

TEST(WatchdogFifo, ASecondHydroLaunchOnTheSameFifoIsRefusedWhileTheFirstServesIt) {
  test::TempDir t;
  const std::string fifo = t.path + "/timers";
  std::unique_ptr<Watchdog> first, second;
  ASSERT_TRUE(Watchdog::open(fifo, &first).ok());
  Status st = Watchdog::open(fifo, &second);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "--watchdog-file: " + fifo +
                              " is already served by another hydro-launch; give each task its own FIFO (%t in the "
                              "path is the task's rank, e.g. /tmp/hydro-watchdog-%j.%t)");
  EXPECT_TRUE(posix_fs().exists(fifo)) << "the refused one must not remove the first one's FIFO";
  first.reset();
  EXPECT_FALSE(posix_fs().exists(fifo));
  ASSERT_TRUE(Watchdog::open(fifo, &second).ok()) << "free again once the first is gone";
}

TEST(WatchdogFifo, AFloodOfRequestsIsReadInBoundedTurnsSoSignalsAreNotHeldUp) {
  test::TempDir t;
  const std::string fifo = t.path + "/timers";
  std::unique_ptr<Watchdog> w;
  ASSERT_TRUE(Watchdog::open(fifo, &w).ok());
  pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    ::pause();
    ::_exit(0);
  }
  ::setpgid(child, child);
  w->set_child(child);
  int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_GE(fd, 0);
  ASSERT_GE(::fcntl(fd, F_SETPIPE_SZ, 1 << 20), 1 << 20);
  const int n = 3000;  // ~100 bytes each: about 300 KB waiting at once
  for (int i = 0; i < n; ++i) {
    TimerRequest r;
    r.pid = child;
    r.scope_id = "scope " + std::to_string(i);
    r.expiration_time = 4e9;
    r.signal = SIGKILL;
    const std::string line = format_timer_request(r) + "\n";
    ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  w->read_requests();
  const size_t first_turn = w->timers().size();
  EXPECT_GT(first_turn, 0u);
  EXPECT_LT(first_turn, static_cast<size_t>(n)) << "one turn must not drain a flood";
  for (int turn = 0; turn < 100 && w->timers().size() < static_cast<size_t>(n); ++turn) w->read_requests();
  EXPECT_EQ(w->timers().size(), static_cast<size_t>(n)) << "every request is read in later turns";
  ::close(fd);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(WatchdogFifo, PercentTIsTheTasksRankAndPercentJTheJob) {
  std::map<std::string, std::string> env{{"SLURM_PROCID", "3"}, {"SLURM_JOB_ID", "77"}};
  auto get = [&](const char* v) -> const char* { return env.count(v) ? env[v].c_str() : nullptr; };
  std::string out;
  ASSERT_TRUE(Watchdog::expand_path("/tmp/wd-%j.%t.100%%", get, &out).ok());
  EXPECT_EQ(out, "/tmp/wd-77.3.100%");
  ASSERT_TRUE(Watchdog::expand_path("/tmp/plain", get, &out).ok());
  EXPECT_EQ(out, "/tmp/plain");
  Status st = Watchdog::expand_path("/tmp/wd-%x", get, &out);
  EXPECT_EQ(st.message(),
            "--watchdog-file: '/tmp/wd-%x' has an unknown escape '%x' (known: %t the task's rank, %j "
            "the job id, %% a percent sign)");
  env.clear();
  st = Watchdog::expand_path("/tmp/wd-%t", get, &out);
  EXPECT_EQ(st.message(), "--watchdog-file: '/tmp/wd-%t' uses %t, but SLURM_PROCID is not set (outside srun)");
}

}  // namespace
}  // namespace hydro
