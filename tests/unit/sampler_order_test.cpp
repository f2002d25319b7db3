// The DistributedSampler arithmetic (hydro/sampler_order.h) on hand-worked cases, and the resume
// rule's properties. hydro_sampler_tests checks the same against python3-torch itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "hydro/sampler_order.h"

namespace hydro {
namespace {

std::vector<int64_t> order_of(int64_t n) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(static_cast<unsigned>(n)));
  return perm;
}

std::vector<int64_t> rank_order(const std::vector<int64_t>& perm, int64_t world, int64_t rank, bool drop_last) {
  std::vector<int64_t> out;
  Status s = sampler_rank_order(perm, world, rank, drop_last, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

std::vector<int64_t> resume_order(const std::vector<int64_t>& perm, int64_t consumed, int64_t saved_world,
                                  int64_t world, int64_t rank, bool drop_last) {
  std::vector<int64_t> out;
  Status s = sampler_resume_order(perm, consumed, saved_world, world, rank, drop_last, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

using V = std::vector<int64_t>;

TEST(SamplerOrder, CountsFollowPyTorch) {
  EXPECT_EQ(sampler_num_samples(10, 3, false), 4);
  EXPECT_EQ(sampler_total_size(10, 3, false), 12);
  EXPECT_EQ(sampler_num_samples(10, 3, true), 3);
  EXPECT_EQ(sampler_total_size(10, 3, true), 9);
  EXPECT_EQ(sampler_num_samples(12, 3, true), 4);
  EXPECT_EQ(sampler_num_samples(2, 5, false), 1);
  EXPECT_EQ(sampler_num_samples(2, 5, true), 0);
  EXPECT_EQ(sampler_max_consumed(10, 3, false), 12);
  EXPECT_EQ(sampler_max_consumed(10, 3, true), 10);
}

TEST(SamplerOrder, PaddingRepeatsTheStartOfTheOrder) {
  const V perm = {5, 2, 8, 0, 9, 1, 7, 3, 6, 4};
  EXPECT_EQ(rank_order(perm, 3, 0, false), (V{5, 0, 7, 4}));
  EXPECT_EQ(rank_order(perm, 3, 1, false), (V{2, 9, 3, 5}));
  EXPECT_EQ(rank_order(perm, 3, 2, false), (V{8, 1, 6, 2}));
  EXPECT_EQ(rank_order(perm, 3, 0, true), (V{5, 0, 7}));
  EXPECT_EQ(rank_order(perm, 3, 2, true), (V{8, 1, 6}));
}

TEST(SamplerOrder, PaddingWrapsWhenThereAreMoreRanksThanSamples) {
  const V perm = {1, 0};
  EXPECT_EQ(rank_order(perm, 5, 0, false), (V{1}));
  EXPECT_EQ(rank_order(perm, 5, 1, false), (V{0}));
  EXPECT_EQ(rank_order(perm, 5, 2, false), (V{1}));
  EXPECT_EQ(rank_order(perm, 5, 3, false), (V{0}));
  EXPECT_EQ(rank_order(perm, 5, 4, false), (V{1}));
  EXPECT_EQ(rank_order(perm, 5, 4, true), (V{}));
  EXPECT_EQ(rank_order({}, 2, 1, false), (V{}));
}

TEST(SamplerOrder, ResumingOnTheSameWorldGivesTheRestOfTheEpoch) {
  for (int64_t n : {1, 2, 5, 10, 11, 13, 64}) {
    const V perm = order_of(n);
    for (int64_t world = 1; world <= 4; ++world)
      for (bool drop_last : {false, true})
        for (int64_t rank = 0; rank < world; ++rank) {
          const V full = rank_order(perm, world, rank, drop_last);
          for (size_t k = 0; k <= full.size(); ++k) {
            const V rest(full.begin() + static_cast<long>(k), full.end());
            EXPECT_EQ(resume_order(perm, static_cast<int64_t>(k) * world, world, world, rank, drop_last), rest)
                << "n=" << n << " world=" << world << " rank=" << rank << " k=" << k << " drop_last=" << drop_last;
          }
        }
  }
}

TEST(SamplerOrder, ANewWorldSizeTakesEveryRemainingSampleOnce) {
  for (int64_t n : {1, 7, 12, 13, 30}) {
    const V perm = order_of(n);
    for (int64_t old_world = 1; old_world <= 4; ++old_world)
      for (int64_t world = 1; world <= 4; ++world)
        for (bool drop_last : {false, true})
          for (int64_t k = 0; k <= sampler_num_samples(n, old_world, drop_last); ++k) {
            const int64_t consumed = k * old_world;
            std::map<int64_t, int> seen;
            for (int64_t r = 0; r < old_world; ++r)
              for (int64_t i = 0; i < k; ++i) seen[rank_order(perm, old_world, r, drop_last)[static_cast<size_t>(i)]]++;
            int64_t taken = 0;
            for (int64_t r = 0; r < world; ++r)
              for (int64_t idx : resume_order(perm, consumed, old_world, world, r, drop_last)) {
                seen[idx]++;
                taken++;
              }
            const int64_t m = std::max<int64_t>(n - consumed, 0);
            EXPECT_EQ(taken, sampler_total_size(m, world, drop_last));
            int64_t missing = 0, repeats = 0;
            for (int64_t i = 0; i < n; ++i) {
              if (seen[i] == 0) missing++;
              if (seen[i] > 1) repeats += seen[i] - 1;
            }
            const std::string where = "n=" + std::to_string(n) + " " + std::to_string(old_world) + "->" +
                                      std::to_string(world) + " k=" + std::to_string(k) +
                                      (drop_last ? " drop_last" : "");
            if (drop_last) {
              EXPECT_EQ(repeats, 0) << where;
              // Only the tail that does not fill a row of ranks is dropped, as PyTorch does.
              EXPECT_LT(missing, std::max(old_world, world)) << where;
            } else {
              EXPECT_EQ(missing, 0) << where;
              // Padding: below one sample per rank of the world that padded.
              EXPECT_LT(repeats, std::max(old_world, world)) << where;
            }
          }
  }
}

TEST(SamplerOrder, PaddingAfterAWorldChangeWrapsToTheStartOfTheOrder) {
  const V perm = {4, 3, 2, 1, 0};
  // 2 ranks took 4 samples (4, 3, 2, 1); 3 ranks share the last one and pad from the start.
  EXPECT_EQ(resume_order(perm, 4, 2, 3, 0, false), (V{0}));
  EXPECT_EQ(resume_order(perm, 4, 2, 3, 1, false), (V{4}));
  EXPECT_EQ(resume_order(perm, 4, 2, 3, 2, false), (V{3}));
  EXPECT_EQ(resume_order(perm, 4, 2, 3, 2, true), (V{}));
  // An epoch finished on 4 ranks (5 samples and 3 padding) is finished on 1 rank too.
  EXPECT_EQ(resume_order(perm, 8, 4, 1, 0, false), (V{}));
}

TEST(SamplerOrder, BadInputsAreRejectedWithTheSetting) {
  const V perm = order_of(10);
  std::vector<int64_t> out;
  EXPECT_EQ(sampler_rank_order(perm, 0, 0, false, &out).message(), "sampler: num_replicas=0 must be at least 1");
  EXPECT_EQ(sampler_rank_order(perm, 2, 2, false, &out).message(), "sampler: rank=2 must be in [0, num_replicas=2)");
  EXPECT_EQ(sampler_rank_order(perm, 2, -1, false, &out).message(), "sampler: rank=-1 must be in [0, num_replicas=2)");
  EXPECT_TRUE(sampler_resume_order(perm, 13, 4, 2, 0, false, &out).ok());
  EXPECT_EQ(sampler_resume_order(perm, 14, 4, 2, 0, false, &out).message(),
            "sampler: consumed=14 is outside [0, 13] for 10 samples on 4 rank(s)");
  EXPECT_EQ(sampler_resume_order(perm, 11, 4, 2, 0, true, &out).message(),
            "sampler: consumed=11 is outside [0, 10] for 10 samples on 4 rank(s) with drop_last");
  EXPECT_EQ(sampler_resume_order(perm, -1, 1, 1, 0, false, &out).message(),
            "sampler: consumed=-1 is outside [0, 10] for 10 samples on 1 rank(s)");
  EXPECT_EQ(sampler_resume_order(perm, 0, 0, 1, 0, false, &out).message(),
            "sampler: the saved num_replicas=0 must be at least 1");
  EXPECT_EQ(sampler_resume_order(perm, 0, 0, 1, 0, false, &out).code(), Code::invalid_argument);
}

}  // namespace
}  // namespace hydro
