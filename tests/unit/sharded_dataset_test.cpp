// ShardedFileDataset (hydro/sharded_dataset.h): each rank reads its own files, and its errors.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <set>

#include "error_of.h"
#include "fault_fs.h"
#include "hydro/sampler.h"
#include "hydro/sharded_dataset.h"

namespace hydro {
namespace {

// Sample i: a tensor {i}; every third one saved with a target {-i}.
void write_samples(const std::string& dir, int n) {
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "/sample-%04d.pt", i);
    torch::Tensor data = torch::tensor({static_cast<int64_t>(i)});
    if (i % 3 == 0)
      torch::save(std::vector<torch::Tensor>{data, -data}, dir + name);
    else
      torch::save(data, dir + name);
  }
}

using test::error_of;

TEST(ShardedDataset, EachRankReadsItsOwnDisjointShard) {
  test::TempDir t;
  write_samples(t.path, 11);
  { std::ofstream(t.path + "/.hidden") << "not a sample"; }
  ASSERT_EQ(::mkdir((t.path + "/subdir").c_str(), 0755), 0);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    ShardedFileDataset data(t.path + "/", {3, rank});
    ASSERT_EQ(data.size(), 3u);  // 11 files / 3 ranks: the last 2 belong to no rank
    for (size_t i = 0; i < 3; ++i) {
      auto e = data.get(i);
      const int64_t v = e.data.item<int64_t>();
      EXPECT_EQ(v, rank * 3 + static_cast<int64_t>(i));
      EXPECT_EQ(data.files()[i], t.path + "/sample-000" + std::to_string(v) + ".pt");
      if (v % 3 == 0)
        EXPECT_EQ(e.target.item<int64_t>(), -v);
      else
        EXPECT_FALSE(e.target.defined());
      EXPECT_TRUE(seen.insert(v).second);
    }
  }
  EXPECT_EQ(ShardedFileDataset(t.path, {2, 1, 40}).size(), 2u);  // 40% of 5
}

TEST(ShardedDataset, FeedsADataLoaderThroughAnInterruptibleSampler) {
  test::TempDir t;
  write_samples(t.path, 8);
  ShardedFileDataset data(t.path, {2, 1});
  InterruptibleSampler sampler(data.size().value(), 4);
  auto loader = torch::data::make_data_loader(data, sampler, torch::data::DataLoaderOptions(3).workers(0));
  std::set<int64_t> got;
  for (auto& batch : *loader)
    for (auto& e : batch) got.insert(e.data.item<int64_t>());
  EXPECT_EQ(got, (std::set<int64_t>{4, 5, 6, 7}));
}

TEST(ShardedDataset, ErrorsNameTheFolderOrFile) {
  test::TempDir t;
  EXPECT_EQ(error_of([&] { ShardedFileDataset(t.path + "/none"); }),
            "hydro: sharded dataset: cannot open folder '" + t.path + "/none': No such file or directory");
  EXPECT_EQ(error_of([&] { ShardedFileDataset(t.path); }),
            "hydro: invalid argument: sharded dataset: folder '" + t.path + "' holds no sample files");
  write_samples(t.path, 2);
  EXPECT_EQ(error_of([&] {
              ShardedFileDataset(t.path, {3, 0});
            }),
            "hydro: invalid argument: sharded dataset: 3 ranks but only 2 sample files in '" + t.path +
                "': each rank needs at least one file");
  EXPECT_EQ(error_of([&] {
              ShardedFileDataset(t.path, {1, 0, 0});
            }),
            "hydro: invalid argument: sharded dataset: samples_pct_per_replica=0 must be in (0, 100]");
  { std::ofstream(t.path + "/sample-0002.pt") << "not a torch archive"; }
  ShardedFileDataset data(t.path);
  const std::string bad = "hydro: sharded dataset: cannot read sample file '" + t.path + "/sample-0002.pt': ";
  EXPECT_EQ(error_of([&] { data.get(2); }).substr(0, bad.size()), bad);
  EXPECT_EQ(error_of([&] { data.get(3); }), "hydro: sharded dataset: index 3 is outside this rank's 3 samples");
  torch::serialize::OutputArchive empty;
  empty.save_to(t.path + "/sample-0003.pt");
  ShardedFileDataset data2(t.path);
  EXPECT_EQ(error_of([&] { data2.get(3); }), "hydro: sharded dataset: sample file '" + t.path +
                                                 "/sample-0003.pt' holds no tensor: save one with torch::save(tensor, "
                                                 "path)");
}

}  // namespace
}  // namespace hydro
