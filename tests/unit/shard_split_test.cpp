// Which sample files each rank reads (hydro/shard_split.h).
#include <gtest/gtest.h>

#include <set>

#include "hydro/shard_split.h"

namespace hydro {
namespace {

using Names = std::vector<std::string>;

Names split(const Names& names, int64_t world, int64_t rank, double pct = 100) {
  Names out;
  Status s = shard_split("/data", names, ShardSpec{world, rank, pct}, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

std::string message(const Names& names, int64_t world, int64_t rank, double pct = 100) {
  Names out;
  Status s = shard_split("/data", names, ShardSpec{world, rank, pct}, &out);
  EXPECT_EQ(s.code(), Code::invalid_argument);
  return s.message();
}

TEST(ShardSplit, ContiguousSortedBlocksOfEqualSize) {
  const Names names = {"e.pt", "a.pt", "d.pt", "b.pt", "g.pt", "c.pt", "f.pt"};  // unsorted listing
  EXPECT_EQ(split(names, 1, 0), (Names{"a.pt", "b.pt", "c.pt", "d.pt", "e.pt", "f.pt", "g.pt"}));
  EXPECT_EQ(split(names, 3, 0), (Names{"a.pt", "b.pt"}));
  EXPECT_EQ(split(names, 3, 1), (Names{"c.pt", "d.pt"}));
  EXPECT_EQ(split(names, 3, 2), (Names{"e.pt", "f.pt"}));  // g.pt: the remainder, no rank's
}

TEST(ShardSplit, RanksAreDisjointForEveryWorldAndPercentage) {
  Names names;
  for (int i = 0; i < 23; ++i) names.push_back("s" + std::to_string(100 + i));
  for (int64_t world = 1; world <= 23; ++world)
    for (double pct : {1.0, 10.0, 33.3, 50.0, 99.9, 100.0}) {
      std::set<std::string> seen;
      size_t total = 0;
      for (int64_t r = 0; r < world; ++r) {
        Names got = split(names, world, r, pct);
        ASSERT_FALSE(got.empty());
        EXPECT_EQ(got.size(), split(names, world, 0, pct).size()) << "every rank gets as many";
        total += got.size();
        seen.insert(got.begin(), got.end());
      }
      EXPECT_EQ(seen.size(), total) << "world=" << world << " pct=" << pct;
    }
}

TEST(ShardSplit, APercentageKeepsTheStartOfEachBlock) {
  Names names;
  for (int i = 0; i < 40; ++i) names.push_back("f" + std::to_string(10 + i));
  EXPECT_EQ(split(names, 2, 1, 25), (Names{"f30", "f31", "f32", "f33", "f34"}));
  EXPECT_EQ(split(names, 4, 3, 50), (Names{"f40", "f41", "f42", "f43", "f44"}));
  EXPECT_EQ(split(names, 4, 3, 1), (Names{"f40"}));  // at least one
}

TEST(ShardSplit, BadInputsNameTheFolderOrSetting) {
  EXPECT_EQ(message({}, 1, 0), "sharded dataset: folder '/data' holds no sample files");
  EXPECT_EQ(message({"a", "b"}, 3, 0),
            "sharded dataset: 3 ranks but only 2 sample files in '/data': each rank needs at least one file");
  EXPECT_EQ(message({"a"}, 2, 1),
            "sharded dataset: 2 ranks but only 1 sample file in '/data': each rank needs at least one file");
  EXPECT_EQ(message({"a"}, 1, 0, 0), "sharded dataset: samples_pct_per_replica=0 must be in (0, 100]");
  EXPECT_EQ(message({"a"}, 1, 0, -5), "sharded dataset: samples_pct_per_replica=-5 must be in (0, 100]");
  EXPECT_EQ(message({"a"}, 1, 0, 100.5), "sharded dataset: samples_pct_per_replica=100.5 must be in (0, 100]");
  EXPECT_EQ(message({"a", "b"}, 2, 2), "sharded dataset: rank=2 must be in [0, num_replicas=2)");
  EXPECT_EQ(message({"a", "b"}, 0, 0), "sharded dataset: num_replicas=0 must be at least 1");
}

}  // namespace
}  // namespace hydro
