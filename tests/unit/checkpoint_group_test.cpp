// Multi-rank checkpoints (sync_any / sync_all): the vote, one consistent sharded checkpoint, a rank
// that dies mid-save, and a checkpoint directory that is not shared between nodes. Ranks are
// threads here, with a real filesystem; the srun -n 2 integration test runs real processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <thread>

#include "fault_fs.h"
#include "hydro/checkpoint_group.h"
#include "hydro/resume_choice.h"
#include "memory_store.h"

namespace hydro {
namespace {

using namespace std::chrono_literals;
using test::FaultFs;
using test::MemoryStore;
using test::run_ranks;
using test::TempDir;

Status write_shard(CheckpointWriter& w, int rank) {
  HYDRO_RETURN_IF_ERROR(w.write_file("model.pt", "weights of rank " + std::to_string(rank)));
  return w.write_file("rng.pt", std::string(100, static_cast<char>('a' + rank)));
}

// Ranks 0 to `taking_part` - 1 of `world` save step 5 into `root`, and rank `failing`'s shard
// returns `failure`; rank r waits up to timeout(r) for its peers. Each taking part rank's Status.
std::vector<Status> save_with_a_failed_shard(
    MemoryStore& store, const std::string& root, int world, int taking_part, int failing, const Status& failure,
    const std::function<std::chrono::milliseconds(int)>& timeout = [](int) { return 60000ms; }) {
  return run_ranks(taking_part, [&](int r) {
    CheckpointDir dir(root);
    CheckpointGroup g(store, r, world, "h", timeout(r));
    return g.save(
        dir, 5, false, 0, [&](CheckpointWriter& w) { return r == failing ? failure : write_shard(w, r); }, nullptr);
  });
}

std::string latest_of(const std::string& root) {
  std::string t;
  (void)posix_fs().read_link(root + "/latest", &t);
  return t;
}

TEST(CheckpointGroup, VoteAnyGrantsWhatOneRankAsksAllOnlyWhatEveryRankAsks) {
  for (CheckpointMode mode : {CheckpointMode::sync_any, CheckpointMode::sync_all}) {
    MemoryStore store;
    std::vector<std::unique_ptr<CheckpointGroup>> groups;
    for (int r = 0; r < 3; ++r) groups.emplace_back(new CheckpointGroup(store, r, 3, "h", test::kEveryRankComes));
    // Round 1: only rank 1 wants to exit. Round 2: everyone wants a checkpoint, rank 2 also exit.
    // Round 3: everyone wants to exit.
    struct Ask {
      bool ck, ex;
    };
    std::vector<std::vector<Ask>> rounds = {
        {{0, 0}, {0, 1}, {0, 0}}, {{1, 0}, {1, 0}, {1, 1}}, {{0, 1}, {0, 1}, {0, 1}}};
    std::vector<std::vector<GroupDecision>> got(rounds.size(), std::vector<GroupDecision>(3));
    run_ranks(3, [&](int r) {
      for (size_t i = 0; i < rounds.size(); ++i) {
        Status s = groups[r]->vote(mode, rounds[i][r].ck, rounds[i][r].ex, &got[i][r]);
        if (!s.ok()) return s;
      }
      return Status::OK();
    });
    for (int r = 0; r < 3; ++r) {
      const bool any = mode == CheckpointMode::sync_any;
      EXPECT_EQ(got[0][r].checkpoint, any) << r;
      EXPECT_EQ(got[0][r].exit, any) << r;
      EXPECT_TRUE(got[1][r].checkpoint) << r;
      EXPECT_EQ(got[1][r].exit, any) << r;
      EXPECT_TRUE(got[2][r].checkpoint) << r;
      EXPECT_TRUE(got[2][r].exit) << r;
    }
    // Old rounds' keys are removed: the store does not grow with the number of steps.
    EXPECT_LE(store.size(), 4u);
  }
}

TEST(CheckpointGroup, ASuspendCheckpointIsAllowedOnlyWhenItFitsOnEveryRank) {
  MemoryStore store;
  std::vector<std::unique_ptr<CheckpointGroup>> groups;
  for (int r = 0; r < 3; ++r) groups.emplace_back(new CheckpointGroup(store, r, 3, "h", test::kEveryRankComes));
  // Round 1: rank 2's does not fit. Round 2: every rank's fits, and rank 0 asks to exit.
  // Round 3: rank 1 has its SIGTSTP: every rank checkpoints, even in sync_all.
  std::vector<std::vector<SuspendVote>> votes = {{{true, false}, {true, false}, {false, false}},
                                                 {{true, false}, {true, false}, {true, false}},
                                                 {{true, false}, {true, true}, {true, false}}};
  std::vector<std::vector<GroupDecision>> got(votes.size(), std::vector<GroupDecision>(3));
  run_ranks(3, [&](int r) {
    for (size_t i = 0; i < votes.size(); ++i) {
      Status s = groups[r]->vote(CheckpointMode::sync_all, false, i == 1 && r == 0, &got[i][r], votes[i][r]);
      if (!s.ok()) return s;
    }
    return Status::OK();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(got[0][r].suspend_checkpoint) << r;
    EXPECT_TRUE(got[1][r].suspend_checkpoint) << r;
    EXPECT_FALSE(got[1][r].exit) << "sync_all: one rank of three asked to exit";
    EXPECT_FALSE(got[1][r].checkpoint) << r;
    EXPECT_FALSE(got[1][r].suspend_now) << r;
    EXPECT_TRUE(got[2][r].suspend_now) << r;
    EXPECT_TRUE(got[2][r].checkpoint) << r;
    EXPECT_FALSE(got[2][r].exit) << r;
  }
}

TEST(CheckpointGroup, EveryRankWritesItsShardIntoOneCheckpoint) {
  TempDir t;
  MemoryStore store;
  std::vector<CheckpointInfo> info(3);
  auto st = run_ranks(3, [&](int r) {
    CheckpointDir dir(t.path + "/ck");
    CheckpointGroup g(store, r, 3, "h", test::kEveryRankComes);
    return g.save(
        dir, 40, false, 2, [&](CheckpointWriter& w) { return write_shard(w, r); }, &info[r]);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(info[r].name, "step-000000000040");
  }
  CheckpointDir dir(t.path + "/ck");
  Manifest m;
  Status v = dir.verify("step-000000000040", &m);
  ASSERT_TRUE(v.ok()) << v.to_string();
  EXPECT_TRUE(m.sharded);
  EXPECT_EQ(m.world_size, 3);
  EXPECT_EQ(m.epoch, 2);
  ASSERT_EQ(m.files.size(), 6u);
  std::set<std::string> names;
  for (const auto& f : m.files) names.insert(f.name);
  EXPECT_EQ(names, (std::set<std::string>{"rank-0/model.pt", "rank-0/rng.pt", "rank-1/model.pt", "rank-1/rng.pt",
                                          "rank-2/model.pt", "rank-2/rng.pt"}));
  EXPECT_EQ(latest_of(dir.root()), "step-000000000040");
}

TEST(CheckpointGroup, ARankThatDiesMidSaveLeavesLatestWhereItWas) {
  TempDir t;
  MemoryStore store;
  // A first checkpoint that every rank completes (its fsyncs may take long on a busy disk).
  std::vector<std::unique_ptr<CheckpointGroup>> groups;
  for (int r = 0; r < 2; ++r) groups.emplace_back(new CheckpointGroup(store, r, 2, "h", 60s));
  auto st = run_ranks(2, [&](int r) {
    CheckpointDir dir(t.path + "/ck");
    return groups[r]->save(
        dir, 10, false, 0, [&](CheckpointWriter& w) { return write_shard(w, r); }, nullptr);
  });
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].to_string() << st[1].to_string();
  // Rank 1 writes half its shard and is gone (never reports it durable): it says nothing until
  // rank 0 has given up, after its 300 ms; rank 1's own waits are long, as for the first. New
  // groups count their rounds from 1 again: a store of their own.
  MemoryStore store2;
  groups.clear();
  groups.emplace_back(new CheckpointGroup(store2, 0, 2, "h", 300ms));
  groups.emplace_back(new CheckpointGroup(store2, 1, 2, "h", 60s));
  std::atomic<bool> rank0_gave_up{false};
  st = run_ranks(2, [&](int r) {
    CheckpointDir dir(t.path + "/ck");
    Status s = groups[r]->save(
        dir, 20, false, 0,
        [&](CheckpointWriter& w) -> Status {
          if (r == 1) {
            (void)w.write_file("model.pt", "half");
            (void)test::eventually([&] { return rank0_gave_up.load(); });  // "killed"
            return Status::io("killed");
          }
          return write_shard(w, r);
        },
        nullptr);
    if (r == 0) rank0_gave_up = true;
    return s;
  });
  ASSERT_FALSE(st[0].ok());
  EXPECT_EQ(st[0].message(),
            "checkpoint of step 20 not committed: rank 1 did not report its shard durable within 0 s "
            "(HYDRO_STORE_TIMEOUT): a rank died, hung or is paused too long");
  EXPECT_FALSE(st[1].ok());
  EXPECT_EQ(latest_of(t.path + "/ck"), "step-000000000010");
  CheckpointDir dir(t.path + "/ck");
  auto all = dir.list();
  ASSERT_EQ(all.size(), 1u);
  std::vector<std::string> names;
  ASSERT_TRUE(posix_fs().list_dir(dir.root(), &names).ok());
  for (const auto& n : names) EXPECT_TRUE(n == "latest" || n == "step-000000000010") << "left behind: " << n;
}

TEST(CheckpointGroup, AFailedShardFailsEveryRankAtOnce) {
  TempDir t;
  MemoryStore store;  // each rank would wait a minute if the failure were not told
  auto st = save_with_a_failed_shard(store, t.path + "/ck", 3, 3, 2, Status::io("disk full on rank 2"));
  EXPECT_EQ(st[0].message(), "checkpoint of step 5 not committed: rank 2 failed: disk full on rank 2");
  EXPECT_EQ(st[1].message(), "checkpoint of step 5 not committed: rank 2 failed: disk full on rank 2");
  EXPECT_EQ(st[2].message(), "disk full on rank 2");
  EXPECT_EQ(latest_of(t.path + "/ck"), "");
}

// Rank 1 fails and rank 3 never comes: the committer tells everyone of rank 1's failure at once,
// not after its own store timeout (a minute here), by which time rank 2 (10 s) would have given up
// on it and blamed rank 0.
TEST(CheckpointGroup, AFailedShardIsToldAtOnceWhileAnotherRankIsStillMissing) {
  TempDir t;
  MemoryStore store;
  auto st = save_with_a_failed_shard(store, t.path + "/ck", 4, 3, 1, Status::io("disk full on rank 1"),
                                     [](int r) { return r == 2 ? 10000ms : 60000ms; });
  EXPECT_EQ(st[0].message(), "checkpoint of step 5 not committed: rank 1 failed: disk full on rank 1");
  EXPECT_EQ(st[1].message(), "disk full on rank 1");
  EXPECT_EQ(st[2].message(), "checkpoint of step 5 not committed: rank 1 failed: disk full on rank 1");
  EXPECT_EQ(latest_of(t.path + "/ck"), "");
}

// A shard whose fsync left it uncertain is a failed shard: nothing is committed, and no rank is
// told "committed, durability uncertain" of a checkpoint that is not there.
TEST(CheckpointGroup, AShardOfUncertainDurabilityFailsTheCheckpoint) {
  for (int uncertain : {0, 1}) {
    TempDir t;
    MemoryStore store;
    auto st = save_with_a_failed_shard(store, t.path + "/ck", 3, 3, uncertain,
                                       Status::durability_uncertain("fsync of rank-" + std::to_string(uncertain)));
    for (int r = 0; r < 3; ++r) {
      if (r == uncertain) continue;  // it returns its own status
      EXPECT_FALSE(st[r].ok() || st[r].code() == Code::durability_uncertain) << r << ": " << st[r].to_string();
    }
    if (uncertain == 1)
      EXPECT_EQ(st[0].message(), "checkpoint of step 5 not committed: rank 1 failed: fsync of rank-1");
    EXPECT_EQ(latest_of(t.path + "/ck"), "");
  }
}

// keep_last in a shared directory: the committer removes every rank's shard of the old
// checkpoint, but only after telling its peers that the new one is committed. Here its removal
// waits until rank 1's save has returned, which it could not if the removal came first.
TEST(CheckpointGroup, ThePeersAreToldOfTheCommitBeforeTheCommitterPrunes) {
  TempDir t;
  MemoryStore store;
  FaultFs committer_fs;
  std::atomic<bool> peer_returned{false}, peer_had_returned{false};
  committer_fs.on_remove_tree = [&](const std::string&) {
    for (int i = 0; i < 1000 && !peer_returned; ++i) std::this_thread::sleep_for(10ms);
    peer_had_returned = peer_returned.load();
  };
  std::vector<std::unique_ptr<CheckpointGroup>> groups;
  for (int r = 0; r < 2; ++r) groups.emplace_back(new CheckpointGroup(store, r, 2, "h", 60000ms));
  for (int64_t step : {10, 20}) {
    auto st = run_ranks(2, [&](int r) {
      CheckpointDir dir(t.path + "/ck", r == 0 ? static_cast<Fs&>(committer_fs) : posix_fs(), /*keep_last=*/1);
      Status s = groups[r]->save(
          dir, step, false, 0, [&](CheckpointWriter& w) { return write_shard(w, r); }, nullptr);
      if (r == 1 && step == 20) peer_returned = true;
      return s;
    });
    ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].to_string() << st[1].to_string();
  }
  EXPECT_TRUE(peer_had_returned);
  std::vector<std::string> names;
  ASSERT_TRUE(posix_fs().list_dir(t.path + "/ck", &names).ok());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-000000000020"}));
}

// The committer takes from its peers only names of their own shards: a rank (or anyone who could
// write the store) listing "../../x" or another rank's file commits nothing.
TEST(CheckpointGroup, APeerListingAFileOutsideItsShardCommitsNothing) {
  for (const std::string bad : {"../../../etc/passwd", "rank-0/model.pt", "rank-1/../../x", "/etc/passwd"}) {
    TempDir t;
    MemoryStore store;
    CheckpointGroup g(store, 0, 2, "h", 5000ms);
    std::thread peer([&] {  // rank 1, by hand
      std::string v;
      (void)store.get("hydro/1/staging", 5000ms, &v);
      (void)store.set("hydro/1/durable/1",
                      "{\"code\":\"ok\",\"message\":\"\",\"body\":{\"committer\":0,\"host\":\"h\",\"files\":[[\"" +
                          bad + "\",1,2]]}}");
    });
    CheckpointDir dir(t.path + "/ck");
    Status s = g.save(
        dir, 7, false, 0, [&](CheckpointWriter& w) { return write_shard(w, 0); }, nullptr);
    peer.join();
    EXPECT_EQ(s.message(), "checkpoint of step 7 not committed: rank 1 listed a file outside its shard: '" + bad + "'");
    EXPECT_EQ(latest_of(t.path + "/ck"), "");
  }
}

TEST(CheckpointGroup, UnsharedDirectoriesGetACompleteCheckpointPerNode) {
  TempDir t;
  MemoryStore store;
  // Rank 0 on host a (root A); ranks 1 and 2 on host b, whose root B does not see A.
  auto root_of = [&](int r) { return t.path + (r == 0 ? "/a" : "/b"); };
  std::vector<int> committed(3, -1);
  auto st = run_ranks(3, [&](int r) {
    CheckpointDir dir(root_of(r));
    CheckpointGroup g(store, r, 3, r == 0 ? "a" : "b", test::kEveryRankComes);
    Status s = g.save(
        dir, 30, false, 0, [&](CheckpointWriter& w) { return write_shard(w, r); }, nullptr);
    if (!s.ok()) return s;
    committed[r] = g.committed_last();
    // Every rank can load step 30 from its own node; node b also has an older step 20.
    std::set<int64_t> loadable = r == 0 ? std::set<int64_t>{30} : std::set<int64_t>{20, 30};
    int64_t step = 0;
    HYDRO_RETURN_IF_ERROR(g.agree_on_resume(loadable, &step));
    return step == 30 ? Status::OK() : Status::io("agreed on " + std::to_string(step));
  });
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
  // Each node's copy has one committer, which prunes that node's root: rank 0 on a, one of b's.
  EXPECT_EQ(committed[0], 1);
  EXPECT_EQ(committed[1] + committed[2], 1);
  for (auto [root, shards] :
       {std::pair<std::string, std::set<std::string>>{t.path + "/a", {"rank-0/model.pt", "rank-0/rng.pt"}},
        {t.path + "/b", {"rank-1/model.pt", "rank-1/rng.pt", "rank-2/model.pt", "rank-2/rng.pt"}}}) {
    CheckpointDir dir(root);
    Manifest m;
    Status v = dir.verify("step-000000000030", &m);
    ASSERT_TRUE(v.ok()) << v.to_string();
    std::set<std::string> names;
    for (const auto& f : m.files) names.insert(f.name);
    EXPECT_EQ(names, shards) << root;
    EXPECT_EQ(m.hosts, (std::vector<std::string>{"a", "b", "b"})) << root;  // every rank's host, on each node
    EXPECT_EQ(latest_of(root), "step-000000000030");
  }
}

TEST(CheckpointGroup, ResumeAgreesOnTheNewestStepEveryRankCanLoad) {
  MemoryStore store;
  std::vector<int64_t> got(2);
  run_ranks(2, [&](int r) {
    CheckpointGroup g(store, r, 2, "h", 5000ms);
    return g.agree_on_resume(r == 0 ? std::set<int64_t>{10, 20, 30} : std::set<int64_t>{10, 20}, &got[r]);
  });
  EXPECT_EQ(got[0], 20);
  EXPECT_EQ(got[1], 20);
  run_ranks(2, [&](int r) {
    CheckpointGroup g(store, r, 2, "h", 5000ms);
    for (int i = 0; i < 5; ++i) (void)g.agree_on_resume({}, &got[r]);  // other rounds than above
    return g.agree_on_resume(r == 0 ? std::set<int64_t>{30} : std::set<int64_t>{20}, &got[r]);
  });
  EXPECT_EQ(got[0], -1);
}

// The ranks speak typed messages: a value that is not one (an old in-band "!" failure, or a
// stranger's text) fails the save and names its sender, and never reads as a shard.
TEST(CheckpointGroup, AMalformedMessageFromAPeerCommitsNothingAndNamesIt) {
  TempDir t;
  MemoryStore store;
  CheckpointGroup g(store, 0, 2, "h", 5000ms);
  std::thread peer([&] {  // rank 1, by hand
    std::string v;
    (void)store.get("hydro/1/staging", 5000ms, &v);
    (void)store.set("hydro/1/durable/1", "!disk full");
  });
  CheckpointDir dir(t.path + "/ck");
  Status s = g.save(
      dir, 7, false, 0, [&](CheckpointWriter& w) { return write_shard(w, 0); }, nullptr);
  peer.join();
  EXPECT_EQ(s.code(), Code::corruption);
  EXPECT_EQ(s.message(), "checkpoint of step 7 not committed: rank 1 sent a malformed message");
  EXPECT_FALSE(posix_fs().exists(t.path + "/ck/latest"));
}

// A committer's durability_uncertain reaches every rank as that code, not as a failure.
TEST(CheckpointGroup, ACommitOfUncertainDurabilityReachesThePeersAsSuch) {
  TempDir t;
  MemoryStore store;
  CheckpointGroup g(store, 1, 2, "h", 5000ms);
  std::thread rank0([&] {  // rank 0, by hand: it stages, takes rank 1's shard, then reports
    CheckpointDir d0(t.path + "/ck");
    std::unique_ptr<CheckpointWriter> w;
    ASSERT_TRUE(d0.open(true).ok());
    ASSERT_TRUE(d0.begin(7, &w).ok());
    const std::string name = w->staging().substr(w->staging().rfind('/') + 1);
    (void)store.set("hydro/1/staging", "{\"code\":\"ok\",\"message\":\"\",\"body\":\"" + name + "\"}");
    std::string v;
    (void)store.get("hydro/1/durable/1", 5000ms, &v);
    (void)store.set("hydro/1/committed/0",
                    "{\"code\":\"durability_uncertain\",\"message\":\"fsync of the root failed\",\"body\":null}");
  });
  CheckpointDir dir(t.path + "/ck");
  CheckpointInfo info;
  Status s = g.save(
      dir, 7, false, 0, [&](CheckpointWriter& w) { return write_shard(w, 1); }, &info);
  rank0.join();
  EXPECT_EQ(s.code(), Code::durability_uncertain);
  EXPECT_EQ(s.message(), "fsync of the root failed");
  EXPECT_EQ(info.step, 7);
}

}  // namespace
}  // namespace hydro
