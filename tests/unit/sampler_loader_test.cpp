// The interruptible samplers inside torch::data::make_data_loader, and through a Runtime
// checkpoint (Runtime::track): a job stopped mid-epoch continues at the next sample.
#include <gtest/gtest.h>

#include <sstream>

#include "fault_fs.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"
#include "hydro/sampler.h"

namespace hydro {
namespace {

using Indices = std::vector<size_t>;

// Sample i is the tensor {i}, so a batch shows which indices the sampler chose.
struct IndexDataset : torch::data::datasets::Dataset<IndexDataset> {
  explicit IndexDataset(size_t n) : n(n) {}
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor(static_cast<int64_t>(i), torch::kLong), torch::Tensor()};
  }
  torch::optional<size_t> size() const override { return n; }
  size_t n;
};

Indices indices_of(const std::vector<torch::data::Example<>>& batch) {
  Indices out;
  for (const auto& e : batch) out.push_back(static_cast<size_t>(e.data.item<int64_t>()));
  return out;
}

// Takes `batches` batches of 4 from a fresh loader over `sampler` (all of them when -1).
Indices take(InterruptibleDistributedSampler& sampler, int batches) {
  auto loader = torch::data::make_data_loader(IndexDataset(sampler.size()), sampler,
                                              torch::data::DataLoaderOptions(4).workers(0));
  Indices got;
  for (auto& batch : *loader) {
    Indices b = indices_of(batch);
    got.insert(got.end(), b.begin(), b.end());
    if (--batches == 0) break;
  }
  return got;
}

TEST(SamplerLoader, ALoaderContinuesWhereTheSavedSamplerStopped) {
  InterruptibleDistributedSampler a(37, 2, 1, /*seed=*/3);
  a.set_epoch(1);
  const Indices all = a.epoch_indices();
  Indices first = take(a, 3);  // the loader's copy moved `a` too
  EXPECT_EQ(a.consumed(), 3 * 4 * 2);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  InterruptibleDistributedSampler b(37, 2, 1, 3);
  b.load(in);
  Indices rest = take(b, -1);  // begin() resets the sampler: the loaded position stays
  first.insert(first.end(), rest.begin(), rest.end());
  EXPECT_EQ(first, all);
}

// Workers prefetch: with auto_advance the saved position runs ahead of training; with
// auto_advance off and advance() after each trained batch it is exact.
TEST(SamplerLoader, WithWorkersAdvanceKeepsThePositionExact) {
  for (bool auto_advance : {true, false}) {
    InterruptibleSampler a(60, 2, true, auto_advance);
    const Indices all = a.epoch_indices();
    Indices first;
    {
      auto loader = torch::data::make_data_loader(IndexDataset(60), a, torch::data::DataLoaderOptions(4).workers(2));
      int batches = 0;
      for (auto& batch : *loader) {
        Indices b = indices_of(batch);
        first.insert(first.end(), b.begin(), b.end());
        if (!auto_advance) a.advance(b.size());
        if (++batches == 3) break;
      }
    }  // joins the workers
    if (auto_advance) {
      EXPECT_GT(a.consumed(), 12) << "the loader read ahead";
      continue;
    }
    EXPECT_EQ(a.consumed(), 12);
    InterruptibleSampler b(60, 2, true, false);
    torch::serialize::OutputArchive out;
    a.save(out);
    std::ostringstream bytes;
    out.save_to(bytes);
    torch::serialize::InputArchive in;
    std::istringstream read(bytes.str());
    in.load_from(read);
    b.load(in);
    Indices rest = b.epoch_indices();
    first.insert(first.end(), rest.begin(), rest.end());
    EXPECT_EQ(first, all);
  }
}

TEST(SamplerLoader, LoopingAgainStartsTheNextEpochWithANewShuffle) {
  InterruptibleSampler s(24, 1);
  auto loader = torch::data::make_data_loader(IndexDataset(24), s, torch::data::DataLoaderOptions(5).workers(0));
  std::vector<Indices> epochs;
  for (int e = 0; e < 3; ++e) {
    Indices got;
    for (auto& batch : *loader) {
      Indices b = indices_of(batch);
      got.insert(got.end(), b.begin(), b.end());
    }
    EXPECT_EQ(got.size(), 24u);
    epochs.push_back(got);
  }
  EXPECT_EQ(s.epoch(), 2);
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

class SamplerRuntime : public ::testing::Test {
 protected:
  void SetUp() override { PauseGate::instance().reset_for_test(); }
  void TearDown() override { PauseGate::instance().reset_for_test(); }
};

TEST_F(SamplerRuntime, ACheckpointRestoresTheSamplersEpochAndPosition) {
  test::TempDir t;
  for (auto mode : {CheckpointMode::sync_any, CheckpointMode::async}) {
    Settings s;
    s.checkpoint_dir = t.path + "/" + mode_name(mode);
    s.keep_last = 0;
    s.mode = mode;
    Indices all, first;
    {
      InterruptibleSampler a(50, 11);
      Runtime rt(s);
      rt.track("sampler", a);
      a.set_epoch(2);
      all = a.epoch_indices();
      first = take(a, 4);
      rt.save(7);
      rt.wait_idle();
    }
    InterruptibleSampler b(50, 11);
    Runtime rt(s);
    rt.track("sampler", b);
    EXPECT_EQ(rt.resume(), 7);
    EXPECT_EQ(b.epoch(), 2) << mode_name(mode);
    EXPECT_EQ(b.consumed(), 16) << mode_name(mode);
    Indices rest = take(b, -1);
    first.insert(first.end(), rest.begin(), rest.end());
    EXPECT_EQ(first, all) << mode_name(mode);
  }
}

}  // namespace
}  // namespace hydro
