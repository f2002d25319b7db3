// hydro-launch's watchdog server on its own: /proc parsing, the kills, bad lines.
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
#include "hydro/timer_table.h"
#include "process_info.h"
#include "watchdog.h"
#include "watchdog_helpers.h"

namespace hydro {
namespace {

using launcher::read_proc_stat;
using launcher::Watchdog;
using namespace hydro::test;

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

// A suspend or a pause is no hang: while held no timer expires, and on release every deadline
// moves later by the time held.
TEST(WatchdogServer, APauseHoldsTheTimersAndTheResumeMovesThemLater) {
  test::TempDir t;
  std::unique_ptr<Watchdog> w;
  ASSERT_TRUE(Watchdog::open(t.path + "/timers", &w).ok());
  pid_t child = start_sleeper(/*own_group=*/true);
  w->set_child(child);
  auto now = Watchdog::Clock::now();
  w->handle_line(request(child, "step", wall_now() + 1), now, wall_now());  // 1 s to go
  testing::internal::CaptureStderr();
  w->hold(now);
  EXPECT_EQ(w->poll_timeout_ms(now), -1);
  EXPECT_TRUE(w->check(now + std::chrono::seconds(60)).empty()) << "expired while paused";
  w->release(now + std::chrono::seconds(60));
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("watchdog: timers held while the program is paused\n"), std::string::npos) << said;
  EXPECT_NE(said.find("watchdog: timers run again, 60.0 s later\n"), std::string::npos) << said;
  EXPECT_TRUE(w->check(now + std::chrono::milliseconds(60500)).empty()) << "half a second of its second left";
  testing::internal::CaptureStderr();
  EXPECT_EQ(w->check(now + std::chrono::milliseconds(61100)).size(), 1u);
  (void)testing::internal::GetCapturedStderr();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
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

}  // namespace
}  // namespace hydro
