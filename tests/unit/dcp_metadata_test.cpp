// DCP's index of a sharded state (Manifest::kDcpMetadata, ".metadata"): the one hidden name a
// checkpoint may hold, written at its top by whoever commits it, from every file already written.
// The Python binding's composer merges the ranks' indexes (python.test_fsdp loads the result with
// torch.distributed.checkpoint); here the composer is a plain function.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>

#include "fault_fs.h"
#include "hydro/checkpoint_group.h"
#include "memory_store.h"

namespace hydro {
namespace {

using namespace std::chrono_literals;
using test::MemoryStore;
using test::run_ranks;
using test::TempDir;

// Lists what it was given, and says so in the file it composes.
struct ListingComposer {
  std::atomic<int> calls{0};
  std::set<std::string> seen;
  Composer fn() {
    return [this](const std::string& staging, const std::vector<std::string>& files, std::string* bytes) {
      ++calls;
      seen.insert(files.begin(), files.end());
      for (const auto& f : files)
        if (!std::ifstream(staging + "/" + f)) return Status::io("not in staging: " + f);
      *bytes = "index of " + std::to_string(files.size()) + " files";
      return Status::OK();
    };
  }
};

std::set<std::string> manifest_names(const std::string& root, const std::string& name) {
  Manifest m;
  Status v = CheckpointDir(root).verify(name, &m);
  EXPECT_TRUE(v.ok()) << v.to_string();
  std::set<std::string> names;
  for (const auto& f : m.files) names.insert(f.name);
  return names;
}

TEST(DcpMetadata, OnlyDcpsIndexIsAHiddenNameAndOnlyAtTheTop) {
  EXPECT_TRUE(Manifest::valid_file_name(".metadata"));
  for (const char* bad : {"rank-0/.metadata", ".metadata/x", ".other", ".", "..", "../.metadata"})
    EXPECT_FALSE(Manifest::valid_file_name(bad)) << bad;
}

TEST(DcpMetadata, TheCommitterComposesItFromEveryRanksShardAtTheTop) {
  TempDir t;
  MemoryStore store;
  ListingComposer composer;
  const Composer compose = composer.fn();
  auto st = run_ranks(3, [&](int r) {
    CheckpointDir dir(t.path + "/ck");
    CheckpointGroup g(store, r, 3, "h", 5000ms);
    return g.save(
        dir, 40, false, 0, [&](CheckpointWriter& w) { return w.write_file("model.pt", "shard " + std::to_string(r)); },
        nullptr, &compose);
  });
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << st[r].to_string();
  EXPECT_EQ(composer.calls, 1);  // by the committer alone
  EXPECT_EQ(composer.seen, (std::set<std::string>{"rank-0/model.pt", "rank-1/model.pt", "rank-2/model.pt"}));
  EXPECT_EQ(manifest_names(t.path + "/ck", "step-000000000040"),
            (std::set<std::string>{".metadata", "rank-0/model.pt", "rank-1/model.pt", "rank-2/model.pt"}));
  std::string text;
  ASSERT_TRUE(posix_fs().read_file(t.path + "/ck/latest/.metadata", &text).ok());
  EXPECT_EQ(text, "index of 3 files");
}

// A root each node sees alone: each node's copy lacks the other's shards, so neither is DCP's.
TEST(DcpMetadata, ANodesCopyOfAnUnsharedRootHasNone) {
  TempDir t;
  MemoryStore store;
  ListingComposer composer;
  const Composer compose = composer.fn();
  auto st = run_ranks(3, [&](int r) {
    CheckpointDir dir(t.path + (r == 0 ? "/a" : "/b"));
    CheckpointGroup g(store, r, 3, r == 0 ? "a" : "b", 5000ms);
    return g.save(
        dir, 30, false, 0, [&](CheckpointWriter& w) { return w.write_file("model.pt", "x"); }, nullptr, &compose);
  });
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << st[r].to_string();
  EXPECT_EQ(composer.calls, 0);
  EXPECT_EQ(manifest_names(t.path + "/b", "step-000000000030"),
            (std::set<std::string>{"rank-1/model.pt", "rank-2/model.pt"}));
}

// One writer's checkpoint of `step` in `dir`, with its model.pt written.
std::unique_ptr<CheckpointWriter> with_a_model(CheckpointDir& dir, int64_t step) {
  std::unique_ptr<CheckpointWriter> w;
  Status s = dir.open();
  if (s.ok()) s = dir.begin(step, &w);
  if (s.ok()) s = w->write_file("model.pt", "weights");
  EXPECT_TRUE(s.ok()) << s.to_string();
  return w;
}

TEST(DcpMetadata, AFailedComposeCommitsTheCheckpointWithoutIt) {
  TempDir t;
  CheckpointDir dir(t.path);
  auto w = with_a_model(dir, 7);
  ASSERT_TRUE(w);
  Status s = w->compose_dcp_metadata(
      [](const std::string&, const std::vector<std::string>&, std::string*) { return Status::io("no index"); });
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(manifest_names(t.path, "step-000000000007"), (std::set<std::string>{"model.pt"}));
}

TEST(DcpMetadata, ItIsCheckedAsAnyFileOfTheCheckpoint) {
  TempDir t;
  CheckpointDir dir(t.path);
  auto w = with_a_model(dir, 8);
  ASSERT_TRUE(w);
  ListingComposer composer;
  ASSERT_TRUE(w->compose_dcp_metadata(composer.fn()).ok());
  ASSERT_TRUE(w->commit().ok());
  { std::ofstream(t.path + "/step-000000000008/.metadata", std::ios::app) << "torn"; }
  Status v = dir.verify("step-000000000008");
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.message().find(".metadata"), std::string::npos) << v.to_string();
}

}  // namespace
}  // namespace hydro
