// The hang watch counts running time only: held time (a pause pending, a stopped process) is no
// hang, however long; a stretch with no progress and no hold is one.
#include "hydro/hang_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "fault_fs.h"

namespace hydro {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using Clock = RunningClock::Clock;

TEST(RunningClock, CountsTheTimeBetweenObservations) {
  RunningClock c(1s);
  const auto t0 = Clock::now();
  c.restart(t0);
  c.observe(t0 + 200ms, false);
  c.observe(t0 + 500ms, false);
  EXPECT_EQ(c.running(), 500ms);
  EXPECT_EQ(c.held(), 0ms);
}

TEST(RunningClock, LeavesOutHeldTimeAndGapsLongerThanTheMaximum) {
  RunningClock c(1s);
  const auto t0 = Clock::now();
  c.restart(t0);
  c.observe(t0 + 100ms, false);
  c.observe(t0 + 1h, true);  // a pause pending for an hour
  c.observe(t0 + 1h + 100ms, false);
  c.observe(t0 + 3h, false);  // a gap: the process was stopped
  c.observe(t0 + 3h + 100ms, false);
  EXPECT_EQ(c.running(), 300ms);
  EXPECT_EQ(c.held(), 3h - 200ms);
  c.restart(t0 + 4h);
  EXPECT_EQ(c.running(), 0ms);
}

TEST(RunningDeadline, AHoldCountsNothingAndRunningTimeRunsItOut) {
  std::atomic<bool> held{true};
  RunningDeadline d(100ms, RunningDeadline::kSlice, [&] { return held.load(); });
  for (int i = 0; i < 10; ++i) {  // five times the budget, held
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(d.passed());
  }
  EXPECT_EQ(d.next_wait(), 100ms);
  held = false;
  EXPECT_TRUE(eventually([&] { return d.passed(); }));
  EXPECT_EQ(d.next_wait(), 0ms);
}

TEST(RunningDeadline, WaitsInSlicesAndLeavesOutAStop) {
  RunningDeadline d(1s, 10ms, [] { return false; });
  EXPECT_EQ(d.next_wait(), 10ms);      // a slice of looks_every
  std::this_thread::sleep_for(100ms);  // no look for 10 × looks_every: a stop, not running time
  EXPECT_GT(d.left(), 900ms);
}

TEST(HangWatch, CountsNothingBeforeTheFirstProgress) {
  std::atomic<bool> fired{false};
  HangWatch w(
      100ms, [&](double, double) { fired = true; }, 10ms, [] { return false; });
  std::this_thread::sleep_for(1s);  // a resume, a compile: ten times the timeout
  EXPECT_FALSE(fired.load());
  w.progress();
  EXPECT_TRUE(eventually([&] { return fired.load(); }));
}

TEST(HangWatch, FiresOnceWhenNoProgressComesWithinTheTimeout) {
  std::atomic<int> fired{0};
  HangWatch w(
      100ms, [&](double running, double) { fired += running >= 0.1 ? 1 : 100; }, 10ms, [] { return false; });
  w.progress();
  EXPECT_TRUE(eventually([&] { return fired.load() > 0; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(fired.load(), 1);
}

// The steps below come every 10 ms for three times the timeout, 1 s: only a stall of this thread
// of 1 s (0.5 s for the probe) while the watch's thread runs would make the watch speak.
TEST(HangWatch, ProgressKeepsItQuiet) {
  std::atomic<bool> fired{false};
  HangWatch w(
      1s, [&](double, double) { fired = true; }, 10ms, [] { return false; });
  for (int i = 0; i < 300; ++i) {
    w.progress();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(fired.load());
}

// Work between two steps (an operator starts), as the test sets it; counts the probes.
struct FakeWork final : WorkSignal {
  std::atomic<bool> busy{false};
  std::atomic<int> probes{0};
  bool working(std::chrono::milliseconds) override {
    ++probes;
    return busy.load();
  }
};

TEST(HangWatch, WhileStepsEndInTimeItNeverProbesForWork) {
  FakeWork work;
  HangWatch w(
      1s, [](double, double) {}, 10ms, [] { return false; }, &work);
  for (int i = 0; i < 300; ++i) {  // steps of 10 ms for 3 s
    w.progress();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(work.probes.load(), 0) << "a probe costs the operators it sees, so none while steps end";
}

// An evaluation: operators run, no step ends for ten times the timeout. Then the rank blocks (a
// collective whose peer is gone): caught.
TEST(HangWatch, WorkBetweenStepsKeepsItQuietAndItsEndCountsAgain) {
  FakeWork work;
  std::atomic<bool> fired{false};
  HangWatch w(
      100ms, [&](double, double) { fired = true; }, 10ms, [] { return false; }, &work);
  work.busy = true;  // before the step's end: no stall between the two can make a hang
  w.progress();
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(fired.load());
  EXPECT_GT(work.probes.load(), 0);
  work.busy = false;
  EXPECT_TRUE(eventually([&] { return fired.load(); }));
}

TEST(HangWatch, AHoldCountsNothingAndItsEndCountsAgain) {
  std::atomic<bool> held{true}, fired{false};
  HangWatch w(
      100ms, [&](double, double held_s) { fired = held_s > 0.5; }, 10ms, [&] { return held.load(); });
  w.progress();
  std::this_thread::sleep_for(1s);  // ten times the timeout, held
  EXPECT_FALSE(fired.load());
  held = false;
  EXPECT_TRUE(eventually([&] { return fired.load(); }));
}

// A process stopped for 4 times the timeout (as Slurm's suspend stops every rank), then
// continued, goes on with its steps and sees no hang; stopped while it makes no progress at all,
// it does, once it runs again for the timeout.
int child_exit(bool steps_after_stop) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::atomic<bool> fired{false};
    {
      HangWatch w(
          1s, [&](double, double) { fired = true; }, 10ms, [] { return false; });
      w.progress();
      // Steps go on for 8 s; with none, the loop waits (up to a minute) for the watch to speak.
      const auto end = Clock::now() + (steps_after_stop ? 8s : 60s);
      while (Clock::now() < end && !fired) {
        if (steps_after_stop) w.progress();
        std::this_thread::sleep_for(5ms);
      }
    }  // the watch's thread is joined before the exit (ThreadSanitizer: no thread left running)
    ::_exit(fired ? 1 : 0);
  }
  std::this_thread::sleep_for(50ms);
  ::kill(pid, SIGSTOP);
  std::this_thread::sleep_for(4s);
  ::kill(pid, SIGCONT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(HangWatch, AStoppedProcessIsHeldNotHung) { EXPECT_EQ(child_exit(true), 0); }

TEST(HangWatch, NoProgressIsAHangWhateverTheStop) { EXPECT_EQ(child_exit(false), 1); }

}  // namespace
}  // namespace hydro
