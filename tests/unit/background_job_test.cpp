// BackgroundJob: one job at a time, behind the caller, on one thread kept between jobs.
#include "hydro/background_job.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace hydro {
namespace {

TEST(BackgroundJob, RunsEachJobInTurnOnOneThreadKeptBetweenJobs) {
  BackgroundJob bg;
  std::vector<int> order;
  std::vector<std::thread::id> ids;
  for (int i = 0; i < 50; ++i)
    bg.start([&, i] {
      order.push_back(i);  // start() waited for the job before: no two run at once
      ids.push_back(std::this_thread::get_id());
    });
  bg.wait();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  for (const auto& id : ids) EXPECT_EQ(id, ids.front());
  EXPECT_NE(ids.front(), std::this_thread::get_id());
}

TEST(BackgroundJob, StartAndWaitReturnOnlyOnceTheJobInFlightIsDone) {
  BackgroundJob bg;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> first_done{false};
  bg.start([&] {
    gate.wait();
    first_done = true;
  });
  auto second = std::async(std::launch::async, [&] {
    bg.start([] {});
    return first_done.load();
  });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  release.set_value();
  EXPECT_TRUE(second.get());  // the second job was given only after the first ended
  bg.wait();
}

TEST(BackgroundJob, TheDestructorWaitsForTheJobInFlight) {
  std::atomic<bool> done{false};
  {
    BackgroundJob bg;
    bg.start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = true;
    });
  }
  EXPECT_TRUE(done);
}

TEST(BackgroundJob, WaitWithNoJobGivenReturns) {
  BackgroundJob bg;
  bg.wait();
}

// A DataLoader worker is a fork of the training process: it has the object but not the thread,
// and must neither hang nor crash when it waits (a Runtime closed there) or the object goes.
TEST(BackgroundJob, AForkedChildLeavesTheParentsThreadAlone) {
  auto* bg = new BackgroundJob;
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  bg->start([gate] { gate.wait(); });  // in flight across the fork
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    bg->wait();
    delete bg;
    ::_exit(0);
  }
  int status = 0;
  for (int i = 0; i < 600 && ::waitpid(child, &status, WNOHANG) == 0; ++i)  // a bound for a hang
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (::waitpid(child, &status, WNOHANG) == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the forked child waited for the parent's job";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  release.set_value();
  delete bg;
}

}  // namespace
}  // namespace hydro
