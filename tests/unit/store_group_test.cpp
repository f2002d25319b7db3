// A collective commit over hydro's TCP store, as the runtime runs it: ranks are threads here, each
// with its own MUNGE-authenticated connection, and the committer takes every shard report in one
// request (RankStore::get_all). checkpoint_group_test covers the protocol over an in-memory store.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "fault_fs.h"
#include "hydro/checkpoint_group.h"
#include "hydro/manifest.h"
#include "hydro/tcp_store.h"

namespace hydro {
namespace {

using namespace std::chrono_literals;

constexpr int kWorld = 4;
const std::string kScope = "job 1 step 0";

class StoreGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(TcpStoreServer::start(0, kScope, &server_).ok());
    for (int r = 0; r < kWorld; ++r) {
      std::unique_ptr<RankStore> c;
      Status s = connect_tcp_store("127.0.0.1", server_->port(), kScope, 5000ms, &c);
      ASSERT_TRUE(s.ok()) << s.message() << " -- ctest starts munged (fixture munge)";
      clients_.push_back(std::move(c));
    }
  }

  // Ranks 0 to `taking_part` - 1 save `step`; `fill` writes rank r's shard. Each rank's Status.
  // `timeout`: rank 0's store timeout (the others wait 60 s).
  std::vector<Status> save(int64_t step, const std::function<Status(CheckpointWriter&, int)>& fill,
                           int taking_part = kWorld, std::chrono::milliseconds timeout = 60000ms) {
    std::vector<Status> out(kWorld);
    std::vector<std::thread> ranks;
    for (int r = 0; r < taking_part; ++r)
      ranks.emplace_back([&, r] {
        CheckpointGroup group(*clients_[r], r, kWorld, "h", r == 0 ? timeout : 60000ms);
        CheckpointDir dir(t_.path + "/ck");
        out[r] = group.save(
            dir, step, false, 0, [&](CheckpointWriter& w) { return fill(w, r); }, nullptr);
      });
    for (auto& t : ranks) t.join();
    return out;
  }

  test::TempDir t_;
  std::unique_ptr<TcpStoreServer> server_;
  std::vector<std::unique_ptr<RankStore>> clients_;
};

Status shard(CheckpointWriter& w, int r) { return w.write_file("model.pt", "weights of rank " + std::to_string(r)); }

TEST_F(StoreGroupTest, FourRanksCommitOneCheckpointHoldingEveryShard) {
  for (const Status& s : save(7, shard)) ASSERT_TRUE(s.ok()) << s.message();
  CheckpointDir dir(t_.path + "/ck");
  Manifest m;
  Status v = dir.verify("step-000000000007", &m);
  ASSERT_TRUE(v.ok()) << v.to_string();
  EXPECT_EQ(m.world_size, kWorld);
  std::set<std::string> names;
  for (const auto& f : m.files) names.insert(f.name);
  EXPECT_EQ(names, (std::set<std::string>{"rank-0/model.pt", "rank-1/model.pt", "rank-2/model.pt", "rank-3/model.pt"}));
}

TEST_F(StoreGroupTest, AFailedShardIsNamedByEveryRankAndCommitsNothing) {
  auto st =
      save(9, [](CheckpointWriter& w, int r) { return r == 2 ? Status::io("disk full on rank 2") : shard(w, r); });
  for (int r : {0, 1, 3})
    EXPECT_EQ(st[r].message(), "checkpoint of step 9 not committed: rank 2 failed: disk full on rank 2");
  EXPECT_EQ(st[2].message(), "disk full on rank 2");
  EXPECT_TRUE(CheckpointDir(t_.path + "/ck").list().empty());
}

// A rank's connection that counts the shard reports ("durable/") it sends.
class CountsReports : public RankStore {
 public:
  CountsReports(std::unique_ptr<RankStore> inner, std::atomic<int>& reports)
      : inner_(std::move(inner)), reports_(reports) {}
  Status set(const std::string& key, const std::string& value) override {
    Status s = inner_->set(key, value);
    if (key.find("durable/") != std::string::npos) ++reports_;
    return s;
  }
  Status get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override {
    return inner_->get(key, timeout, value);
  }
  Status add(const std::string& key, int64_t delta, int64_t* value) override { return inner_->add(key, delta, value); }
  Status remove(const std::string& key) override { return inner_->remove(key); }
  Status get_all(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                 std::vector<std::optional<std::string>>* values) override {
    return inner_->get_all(keys, timeout, values);
  }

 private:
  std::unique_ptr<RankStore> inner_;
  std::atomic<int>& reports_;
};

// Rank 0 writes its shard, and so starts its 500 ms wait for the others', only once ranks 1 and 2
// have reported theirs: the rank it names is the one that never came, however slow the disk.
TEST_F(StoreGroupTest, ARankThatNeverReportsIsNamedOnceTheStoreTimeoutPasses) {
  std::atomic<int> reports{0};
  for (int r : {1, 2}) clients_[r] = std::make_unique<CountsReports>(std::move(clients_[r]), reports);
  auto fill = [&](CheckpointWriter& w, int r) {
    if (r == 0) (void)test::eventually([&] { return reports == 2; });
    return shard(w, r);
  };
  auto st = save(11, fill, /*taking_part=*/3, 500ms);
  EXPECT_EQ(st[0].message(),
            "checkpoint of step 11 not committed: rank 3 did not report its shard durable within 0 s "
            "(HYDRO_STORE_TIMEOUT): a rank died, hung or is paused too long");
  EXPECT_TRUE(CheckpointDir(t_.path + "/ck").list().empty());
}

// HYDRO_CKPT_MODE=async with sharded state: each rank's save runs on a thread of its own, over a
// second connection, in a key space of its own, while the rank goes on voting at each step's end.
// Rank 3 writes its shard only once every rank has voted 5 times: the votes never wait for the save.
TEST_F(StoreGroupTest, ASaveInItsOwnKeySpaceCommitsWhileTheRanksGoOnVoting) {
  std::vector<std::unique_ptr<RankStore>> save_clients(kWorld);
  for (auto& c : save_clients) ASSERT_TRUE(connect_tcp_store("127.0.0.1", server_->port(), kScope, 5000ms, &c).ok());
  std::atomic<int> voted{0};
  std::vector<Status> saved(kWorld), votes(kWorld);
  std::vector<GroupDecision> last(kWorld);
  auto rank = [&](int r) {
    CheckpointGroup group(*clients_[r], r, kWorld, "h", 60000ms);
    CheckpointGroup saver(*save_clients[r], r, kWorld, "h", 60000ms, "hydro-async");
    std::thread background([&] {
      CheckpointDir dir(t_.path + "/ck");
      saved[r] = saver.save(
          dir, 3, false, 0,
          [&](CheckpointWriter& w) {
            if (r != 3) return shard(w, r);
            for (int i = 0; voted < kWorld && i < 30000; ++i) std::this_thread::sleep_for(1ms);
            return voted == kWorld ? shard(w, r) : Status::io("the votes waited for the save");
          },
          nullptr);
    });
    for (int i = 0; i < 5 && votes[r].ok(); ++i)
      votes[r] = group.vote(CheckpointMode::sync_any, /*want_checkpoint=*/r == 1 && i == 4, false, &last[r]);
    ++voted;
    background.join();
  };
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) ranks.emplace_back(rank, r);
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(votes[r].ok()) << votes[r].message();
    EXPECT_TRUE(last[r].checkpoint) << "rank " << r;
    ASSERT_TRUE(saved[r].ok()) << saved[r].message();
  }
  Manifest m;
  Status v = CheckpointDir(t_.path + "/ck").verify("step-000000000003", &m);
  ASSERT_TRUE(v.ok()) << v.to_string();
  EXPECT_EQ(m.files.size(), static_cast<size_t>(kWorld));
}

// Two groups of the same ranks on one store, in two key spaces, run the same call at once and
// each decides by its own ranks alone: in one space their tallies would mix (one counter per
// round), and both groups would read one decision.
TEST_F(StoreGroupTest, TwoKeySpacesVoteAtOnceAndNeitherSeesTheOthersVotes) {
  std::vector<std::unique_ptr<RankStore>> second(kWorld);
  for (auto& c : second) ASSERT_TRUE(connect_tcp_store("127.0.0.1", server_->port(), kScope, 5000ms, &c).ok());
  std::vector<GroupDecision> asked(kWorld), quiet(kWorld);
  std::vector<Status> a(kWorld), b(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      CheckpointGroup group(*clients_[r], r, kWorld, "h", 60000ms);
      for (int i = 0; i < 3 && a[r].ok(); ++i)
        a[r] = group.vote(CheckpointMode::sync_any, /*want_checkpoint=*/r == 0, false, &asked[r]);
    });
    threads.emplace_back([&, r] {
      CheckpointGroup saver(*second[r], r, kWorld, "h", 60000ms, "hydro-async");
      for (int i = 0; i < 3 && b[r].ok(); ++i) b[r] = saver.vote(CheckpointMode::sync_any, false, false, &quiet[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(a[r].ok() && b[r].ok()) << a[r].message() << b[r].message();
    EXPECT_TRUE(asked[r].checkpoint) << "rank " << r << ": rank 0 asked in this space";
    EXPECT_FALSE(quiet[r].checkpoint) << "rank " << r << ": nobody asked in this one";
  }
}

}  // namespace
}  // namespace hydro
