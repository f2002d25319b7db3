// The ranks at the edges of a run: leaving together (rank 0 serves the store) and resuming
// together from the newest step every rank can load. Ranks are threads here.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "fault_fs.h"
#include "hydro/checkpoint_group.h"
#include "hydro/resume_choice.h"
#include "memory_store.h"

namespace hydro {
namespace {

using namespace std::chrono_literals;
using test::MemoryStore;
using test::run_ranks;
using test::TempDir;

TEST(CheckpointGroupLeave, RankZeroWaitsForEveryRankOthersDoNot) {
  test::MemoryStore store;
  CheckpointGroup r0(store, 0, 2, "h", std::chrono::seconds(5)), r1(store, 1, 2, "h", std::chrono::seconds(5));
  std::atomic<bool> done{false};
  std::thread zero([&] {
    int missing = -1;
    EXPECT_TRUE(r0.leave(std::chrono::seconds(30), &missing).ok());
    EXPECT_EQ(missing, 0);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done) << "rank 0 left before rank 1";
  int missing = -1;
  EXPECT_TRUE(r1.leave(std::chrono::seconds(30), &missing).ok());
  zero.join();
  EXPECT_TRUE(done);
}

TEST(CheckpointGroupLeave, ARankThatNeverLeavesIsReportedAfterTheLimit) {
  test::MemoryStore store;
  CheckpointGroup r0(store, 0, 3, "h", std::chrono::seconds(5));
  int missing = 0;
  Status st = r0.leave(std::chrono::milliseconds(100), &missing);
  EXPECT_EQ(st.message(), "2 rank(s) did not finish");
  EXPECT_EQ(missing, 2);
}

// Under hydro-launch each task's HYDRO_RESUME_FROM is what its own node's directory holds. The
// ranks resume together from what every rank has, whatever each launcher chose.
std::vector<ResumeChoice> choose_on_nodes(const std::vector<std::set<int64_t>>& held, const TempDir& t) {
  const int world = static_cast<int>(held.size());
  std::vector<ResumeChoice> out(world);
  MemoryStore store;
  auto st = run_ranks(world, [&](int r) {
    CheckpointDir dir(t.path + "/node" + std::to_string(r));
    HYDRO_RETURN_IF_ERROR(dir.open());
    for (int64_t step : held[r]) HYDRO_RETURN_IF_ERROR(test::write_checkpoint(dir, step));
    Settings s;
    s.rank = r;
    s.world_size = world;
    s.checkpoint_dir = dir.root();
    if (!held[r].empty()) s.resume_from = dir.root() + "/" + CheckpointDir::name_for(*held[r].rbegin());
    CheckpointGroup g(store, r, world, "node" + std::to_string(r), 5000ms);
    return choose_resume(
        posix_fs(), s, &g, [](const std::string&) {}, &out[r]);
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
  return out;
}

TEST(ResumeChoice, RanksUnderHydroLaunchResumeFromTheNewestStepEveryNodeHasNotEachFromItsOwn) {
  TempDir t;
  auto got = choose_on_nodes({{500, 1000}, {500}}, t);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].manifest.step, 500);
  EXPECT_EQ(got[0].path, t.path + "/node0/step-000000000500");
  EXPECT_EQ(got[1].manifest.step, 500);
  EXPECT_EQ(got[1].path, t.path + "/node1/step-000000000500");
}

TEST(ResumeChoice, WhenOneRankHasNoCheckpointEveryRankStartsFreshInsteadOfWaitingOutTheStore) {
  TempDir t;
  auto got = choose_on_nodes({{500}, {}}, t);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].path, "");
  EXPECT_EQ(got[1].path, "");
}

TEST(ResumeChoice, ARankAloneTakesHydroLaunchsChoiceAndVerifiesIt) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(test::write_checkpoint(dir, 10).ok());
  ASSERT_TRUE(test::write_checkpoint(dir, 20).ok());
  Settings s;
  s.checkpoint_dir = t.path;
  s.resume_from = t.path + "/step-000000000010/";
  ResumeChoice c;
  ASSERT_TRUE(choose_resume(
                  posix_fs(), s, nullptr, [](const std::string&) {}, &c)
                  .ok());
  EXPECT_EQ(c.manifest.step, 10);
  {
    std::fstream f(t.path + "/step-000000000010/optimizer.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('X');
  }
  EXPECT_FALSE(choose_resume(
                   posix_fs(), s, nullptr, [](const std::string&) {}, &c)
                   .ok());
}

}  // namespace
}  // namespace hydro
