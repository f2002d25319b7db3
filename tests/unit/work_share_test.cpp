// WorkShare: tasks the caller must see done before it goes on, shared with one helper thread.
#include "hydro/work_share.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fault_fs.h"

namespace hydro {
namespace {

TEST(WorkShare, FinishReturnsWithEveryTaskDoneAcrossRounds) {
  WorkShare share;
  for (int round = 0; round < 20; ++round) {
    std::vector<std::atomic<int>> done(100);
    for (auto& d : done) share.add([&d] { d.fetch_add(1); });
    share.finish();
    for (const auto& d : done) ASSERT_EQ(d.load(), 1) << "round " << round;
  }
}

TEST(WorkShare, TheHelperTakesTasksBeforeFinish) {
  WorkShare share;
  std::promise<std::thread::id> ran;
  share.add([&] { ran.set_value(std::this_thread::get_id()); });
  std::future<std::thread::id> f = ran.get_future();
  // Nobody calls finish() until the helper ran it: it did, on its own thread.
  EXPECT_NE(f.get(), std::this_thread::get_id());
  share.finish();
}

TEST(WorkShare, TheCallerRunsWhatTheHelperHasNotTaken) {
  WorkShare share;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> helper_busy;
  share.add([&] {
    helper_busy.set_value();
    gate.wait();  // the helper is held here
  });
  helper_busy.get_future().wait();
  std::mutex mu;
  std::set<std::thread::id> ran_on;
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i)
    share.add([&] {
      std::lock_guard<std::mutex> lock(mu);
      ran_on.insert(std::this_thread::get_id());
      ++ran;
    });
  auto finished = std::async(std::launch::async, [&] {
    share.finish();
    return std::this_thread::get_id();
  });
  // finish() runs the ten itself, then waits for the helper's task, which the gate holds.
  EXPECT_TRUE(test::eventually([&] { return ran.load() == 10; }));
  EXPECT_EQ(finished.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(ran_on.size(), 1u);
  }
  release.set_value();
  const std::thread::id caller = finished.get();
  EXPECT_EQ(ran_on, std::set<std::thread::id>{caller});
}

TEST(WorkShare, FinishRethrowsTheFirstErrorAfterRunningTheRest) {
  WorkShare share;
  std::atomic<int> ran{0};
  share.add([] { throw std::runtime_error("first"); });
  for (int i = 0; i < 5; ++i) share.add([&] { ran.fetch_add(1); });
  try {
    share.finish();
    ADD_FAILURE() << "finish() did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_EQ(ran.load(), 5);
  share.add([&] { ran.fetch_add(1); });
  EXPECT_NO_THROW(share.finish());  // the error was reported once
  EXPECT_EQ(ran.load(), 6);
}

TEST(WorkShare, TheDestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    WorkShare share;
    for (int i = 0; i < 10; ++i) share.add([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 10);
}

// Forked while the parent's helper is busy waking for a task (it may hold the lock then): the
// child runs its own tasks, touches no lock the helper may hold, and sees its tasks' exceptions.
TEST(WorkShare, AForkedChildRunsItsTasksItself) {
  WorkShare share;
  for (int round = 0; round < 200; ++round) {
    share.add([] {});
    share.finish();  // the helper runs in the parent
    share.add([] {});
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int ran = 0;
      for (int i = 0; i < 3; ++i) share.add([&] { ++ran; });
      share.add([] { throw std::runtime_error("in the child"); });
      bool thrown = false;
      try {
        share.finish();
      } catch (const std::runtime_error&) {
        thrown = true;
      }
      ::_exit(ran == 3 && thrown ? 0 : 1);  // no helper here: add() ran them
    }
    share.finish();
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
  }
}

}  // namespace
}  // namespace hydro
