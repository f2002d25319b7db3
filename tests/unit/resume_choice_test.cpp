// The ranks at the edges of a run: leaving together (rank 0 serves the store) and resuming
// together from the newest step every rank can load. Ranks are threads here.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>

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

// Rank 0 of `world` ranks (the group's timeout `timeout`) leaving while no other rank ever does:
// what leave(limit) says, and the count of ranks it names missing.
std::pair<std::string, int> leave_alone(int world, std::chrono::milliseconds timeout, std::chrono::milliseconds limit) {
  test::MemoryStore store;
  CheckpointGroup r0(store, 0, world, "h", timeout);
  int missing = 0;
  Status st = r0.leave(limit, &missing);
  return {st.message(), missing};
}

TEST(CheckpointGroupLeave, ARankThatNeverLeavesIsReportedAfterTheLimit) {
  EXPECT_EQ(leave_alone(3, std::chrono::seconds(5), std::chrono::milliseconds(100)),
            std::make_pair(std::string("2 rank(s) did not finish"), 2));
}

// A rank killed before it left is waited for no longer than any other wait of the group.
TEST(CheckpointGroupLeave, ARankThatNeverLeavesIsWaitedForNoLongerThanTheGroupsTimeout) {
  EXPECT_EQ(leave_alone(2, std::chrono::milliseconds(100), std::chrono::hours(1)),
            std::make_pair(std::string("1 rank(s) did not finish"), 1));
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
    CheckpointGroup g(store, r, world, "node" + std::to_string(r), test::kEveryRankComes);
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

// Node-local directories, one per host, as a multi-host job leaves them: each host's root holds its
// own ranks' shards of each step (CheckpointGroup's per-node commit).
void save_on_hosts(const TempDir& t, const std::vector<std::string>& hosts, int64_t step) {
  const int world = static_cast<int>(hosts.size());
  MemoryStore store;
  auto st = run_ranks(world, [&](int r) {
    CheckpointDir dir(t.path + "/" + hosts[r]);
    CheckpointGroup g(store, r, world, hosts[r], test::kEveryRankComes);
    return g.save(
        dir, step, false, 0, [&](CheckpointWriter& w) { return w.write_file("model.pt", "rank " + std::to_string(r)); },
        nullptr);
  });
  for (int r = 0; r < world; ++r) ASSERT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
}

// Resumes ranks on `hosts`, each from its host's root; the status of each rank.
std::vector<Status> resume_on_hosts(const TempDir& t, const std::vector<std::string>& hosts,
                                    std::vector<ResumeChoice>* out, bool reshard = false) {
  const int world = static_cast<int>(hosts.size());
  out->assign(world, {});
  MemoryStore store;
  return run_ranks(world, [&](int r) {
    Settings s;
    s.rank = r;
    s.world_size = world;
    s.checkpoint_dir = t.path + "/" + hosts[r];
    CheckpointGroup g(store, r, world, hosts[r], test::kEveryRankComes);
    return choose_resume(
        posix_fs(), s, &g, [](const std::string&) {}, &(*out)[r], reshard);
  });
}

// Each rank checks its own shard only; the newest step every rank passed is the one resumed.
TEST(ResumeChoice, AShardCorruptedInOneRankTakesTheGroupBackToTheStepBefore) {
  TempDir t;
  save_on_hosts(t, {"n", "n"}, 10);
  save_on_hosts(t, {"n", "n"}, 20);
  {
    std::ofstream f(t.path + "/n/step-000000000020/rank-1/model.pt", std::ios::binary | std::ios::trunc);
    f << "rank X";
  }
  std::vector<ResumeChoice> got;
  auto st = resume_on_hosts(t, {"n", "n"}, &got);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(got[r].manifest.step, 10) << r;
  }
}

TEST(ResumeChoice, AGroupOfAnotherSizeStopsInsteadOfStartingOverWhenItsStateCannotBeResharded) {
  TempDir t;
  save_on_hosts(t, {"n", "n"}, 10);
  std::vector<ResumeChoice> got;
  auto st = resume_on_hosts(t, {"n", "n", "n"}, &got);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r].code(), Code::invalid_argument) << r;
    EXPECT_NE(st[r].message().find("the checkpoint of step 10 in " + t.path +
                                   "/n has the shards of 2 ranks, this job "
                                   "has 3, and its state cannot be resharded"),
              std::string::npos)
        << st[r].message();
  }
}

TEST(ResumeChoice, AGroupThatReshardsResumesFromACheckpointOfAnotherSizeInASharedDirectory) {
  TempDir t;
  save_on_hosts(t, {"n", "n"}, 10);
  std::vector<ResumeChoice> got;
  auto st = resume_on_hosts(t, {"n", "n", "n"}, &got, /*reshard=*/true);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(got[r].manifest.step, 10) << r;
    EXPECT_EQ(got[r].manifest.world_size, 2) << r;
  }
}

// A resume onto another number of ranks reads the same file of every rank's shard (hydro.reshard).
TEST(ResumeChoice, RankFilesAreTheSameFileOfEveryShardOrTheFileAlone) {
  TempDir t;
  save_on_hosts(t, {"n", "n", "n"}, 10);
  const std::string step = t.path + "/n/step-000000000010";
  std::vector<std::string> files;
  ASSERT_TRUE(rank_files(posix_fs(), step + "/rank-1/model.pt", &files).ok());
  EXPECT_EQ(files, (std::vector<std::string>{step + "/rank-0/model.pt", step + "/rank-1/model.pt",
                                             step + "/rank-2/model.pt"}));
  for (const std::string& alone : {t.path + "/n/model.pt", step + "/model.pt", std::string("model.pt")}) {
    ASSERT_TRUE(rank_files(posix_fs(), alone, &files).ok()) << alone;
    EXPECT_EQ(files, std::vector<std::string>{alone});
  }
  ASSERT_TRUE(rank_files(posix_fs(), step + "/rank-7/model.pt", &files).ok());  // no such rank: not a shard
  EXPECT_EQ(files.size(), 1u);
  std::remove((step + "/manifest.json").c_str());
  EXPECT_EQ(rank_files(posix_fs(), step + "/rank-1/model.pt", &files).code(), Code::corruption);
}

TEST(ResumeChoice, ARequeueOntoOtherHostsStopsInsteadOfResumingFromAnOlderStepWithNodeLocalDirectories) {
  TempDir t;
  save_on_hosts(t, {"node1", "node1", "node2", "node2"}, 10);
  save_on_hosts(t, {"node1", "node1", "node2", "node2"}, 20);
  // Requeued onto node2 and node3: node2 holds ranks 2 and 3's shards, node3 nothing.
  std::vector<ResumeChoice> got;
  auto st = resume_on_hosts(t, {"node2", "node2", "node3", "node3"}, &got);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(st[r].code(), Code::not_found) << r;
    EXPECT_EQ(st[r].message(),
              "resume: the checkpoint of step 20 cannot be loaded by every rank: rank 0 wrote its shard on host node1 "
              "and runs on node2 now, which does not have it (node-local checkpoint directories stay on the hosts "
              "the job ran on). Resuming from step 0 (no checkpoint every rank has) would lose the steps since, so "
              "hydro stops. Run the job on the hosts it ran on (sbatch --nodelist), or keep checkpoints in a "
              "directory every node shares; to start over on purpose, move the checkpoints out of HYDRO_CKPT_DIR")
        << r;
  }
}

TEST(ResumeChoice, BackOnItsHostsTheJobResumesFromItsNewestStep) {
  TempDir t;
  save_on_hosts(t, {"node1", "node1", "node2", "node2"}, 10);
  save_on_hosts(t, {"node1", "node1", "node2", "node2"}, 20);
  std::vector<ResumeChoice> got;
  auto st = resume_on_hosts(t, {"node1", "node1", "node2", "node2"}, &got);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(got[r].manifest.step, 20) << r;
    EXPECT_TRUE(got[r].manifest.holds_shard(r)) << r;
  }
}

// A step that one host committed and the other never did (it died first): on the same hosts the
// ranks fall back together to the newest step every host committed.
TEST(ResumeChoice, AStepOnlyOneHostCommittedFallsBackToTheOneBeforeOnTheSameHosts) {
  TempDir t;
  save_on_hosts(t, {"node1", "node2"}, 10);
  save_on_hosts(t, {"node1", "node2"}, 20);
  std::filesystem::remove_all(t.path + "/node2/step-000000000020");
  std::vector<ResumeChoice> got;
  auto st = resume_on_hosts(t, {"node1", "node2"}, &got);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(got[r].manifest.step, 10) << r;
  }
}

}  // namespace
}  // namespace hydro
