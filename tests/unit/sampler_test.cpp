// The interruptible samplers (hydro/sampler.h) against python3-torch's own DistributedSampler,
// resumed at every position, across a change of world size, and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "error_of.h"
#include "hydro/sampler.h"
#include "python_oracle.h"

namespace hydro {
namespace {

using Indices = std::vector<size_t>;
using test::SamplerCase;

const std::map<SamplerCase, Indices>& oracle() {
  std::string error;
  const auto& cases = test::distributed_sampler_oracle(&error);
  EXPECT_EQ(error, "");
  return cases;
}

InterruptibleDistributedSampler make(const SamplerCase& c) {
  return InterruptibleDistributedSampler(static_cast<size_t>(c.n), c.world, c.rank, c.seed, c.shuffle, c.drop_last);
}

// Everything the sampler hands out until the epoch ends, in batches of `batch`.
Indices drain(InterruptibleDistributedSampler& s, size_t batch = 3) {
  Indices all;
  while (auto b = s.next(batch)) all.insert(all.end(), b->begin(), b->end());
  return all;
}

// save() then load() into `into`, through the bytes a checkpoint file holds.
void round_trip(const InterruptibleDistributedSampler& from, InterruptibleDistributedSampler& into) {
  torch::serialize::OutputArchive out;
  from.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  into.load(in);
}

using test::error_of;

TEST(Sampler, PythonHasTorch) {
  // Never skipped: without python3-torch the comparisons below cannot run.
  EXPECT_EQ(test::python_torch_problem(), "");
}

TEST(Sampler, EveryRankMatchesPyTorchsDistributedSampler) {
  const auto& cases = oracle();
  // sizes x (1+2+3+4 rank cases) x seeds x epochs x shuffle x drop_last
  ASSERT_EQ(cases.size(), test::oracle_sizes().size() * 10 * test::oracle_seeds().size() * 3 * 4);
  for (const auto& [c, expected] : cases) {
    auto s = make(c);
    s.set_epoch(c.epoch);
    EXPECT_EQ(drain(s, 1 + static_cast<size_t>(c.n % 4)), expected)
        << "n=" << c.n << " world=" << c.world << " rank=" << c.rank << " seed=" << c.seed << " epoch=" << c.epoch
        << " shuffle=" << c.shuffle << " drop_last=" << c.drop_last;
  }
}

TEST(Sampler, OneRankIsTheDistributedSamplerOnOneRank) {
  for (const auto& [c, expected] : oracle()) {
    if (c.world != 1 || c.drop_last) continue;
    InterruptibleSampler s(static_cast<size_t>(c.n), c.seed, c.shuffle);
    s.set_epoch(c.epoch);
    EXPECT_EQ(drain(s), expected) << "n=" << c.n << " seed=" << c.seed << " epoch=" << c.epoch;
  }
}

TEST(Sampler, ResumingAtEveryPositionYieldsTheRestOfTheEpoch) {
  for (const auto& [c, expected] : oracle()) {
    if (c.seed != 1 || c.epoch != 2 || (c.n != 1 && c.n != 10 && c.n != 13 && c.n != 257)) continue;
    for (size_t p = 0; p <= expected.size(); ++p) {
      auto a = make(c);
      a.set_epoch(c.epoch);
      if (p > 0) {
        ASSERT_TRUE(a.next(p));
      }
      auto b = make(c);
      round_trip(a, b);
      ASSERT_EQ(b.epoch(), c.epoch);
      ASSERT_EQ(b.consumed(), static_cast<int64_t>(p) * c.world);
      ASSERT_EQ(drain(b, 2), Indices(expected.begin() + static_cast<long>(p), expected.end()))
          << "n=" << c.n << " world=" << c.world << " rank=" << c.rank << " shuffle=" << c.shuffle
          << " drop_last=" << c.drop_last << " saved at " << p;
    }
  }
}

// `old_world` ranks each take `k` samples; the checkpoint is loaded on `new_world` ranks, which
// finish the epoch. Returns how often each index was taken over the whole epoch.
std::map<size_t, int> epoch_across_worlds(size_t n, int64_t old_world, int64_t new_world, size_t k, bool drop_last) {
  std::map<size_t, int> seen;
  std::vector<InterruptibleDistributedSampler> old;
  for (int64_t r = 0; r < old_world; ++r) {
    old.emplace_back(n, old_world, r, /*seed=*/9, /*shuffle=*/true, drop_last);
    old.back().set_epoch(1);
    if (k > 0)
      if (auto b = old.back().next(k)) {
        EXPECT_EQ(b->size(), k);
        for (size_t i : *b) seen[i]++;
      }
  }
  for (int64_t r = 0; r < new_world; ++r) {
    InterruptibleDistributedSampler s(n, new_world, r, 9, true, drop_last);
    round_trip(old[static_cast<size_t>(r % old_world)], s);  // every rank saved the same position
    EXPECT_EQ(s.epoch(), 1);
    for (size_t i : drain(s)) seen[i]++;
  }
  return seen;
}

TEST(Sampler, AWorldSizeChangeLosesNoSampleAndRepeatsNone) {
  const std::pair<int64_t, int64_t> changes[] = {{2, 3}, {3, 1}, {1, 4}, {4, 2}};
  for (size_t n : {12u, 13u, 257u})
    for (auto [from, to] : changes)
      for (bool drop_last : {false, true})
        for (size_t k : {size_t{0}, size_t{1}, size_t{3}, n / static_cast<size_t>(from)}) {
          const auto seen = epoch_across_worlds(n, from, to, k, drop_last);
          size_t missing = 0, repeats = 0;
          for (size_t i = 0; i < n; ++i) {
            auto it = seen.find(i);
            if (it == seen.end())
              missing++;
            else
              repeats += static_cast<size_t>(it->second - 1);
          }
          const std::string where = "n=" + std::to_string(n) + " " + std::to_string(from) + "->" + std::to_string(to) +
                                    " after " + std::to_string(k) + (drop_last ? " drop_last" : "");
          if (drop_last) {
            EXPECT_EQ(repeats, 0u) << where;
            EXPECT_LT(missing, static_cast<size_t>(to)) << where << ": only the last partial row is dropped";
          } else {
            EXPECT_EQ(missing, 0u) << where;
            EXPECT_LT(repeats, static_cast<size_t>(to)) << where << ": only padding repeats";
          }
        }
}

TEST(Sampler, AnEpochFinishedOnMoreRanksIsFinishedOnFewer) {
  InterruptibleDistributedSampler a(10, 4, 3, 0, true, false);  // 3 per rank: 12 with padding
  drain(a);
  InterruptibleDistributedSampler b(10, 1, 0, 0, true, false);
  round_trip(a, b);
  EXPECT_EQ(b.consumed(), 12);
  EXPECT_FALSE(b.next(1));
}

TEST(Sampler, EveryEpochHasANewShuffle) {
  InterruptibleSampler s(200, /*seed=*/5);
  std::set<Indices> orders;
  for (int epoch = 0; epoch < 4; ++epoch) {
    Indices order = drain(s);
    Indices sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
    orders.insert(order);
    s.reset();  // the epoch is over: reset() starts the next one
    EXPECT_EQ(s.epoch(), epoch + 1);
  }
  EXPECT_EQ(orders.size(), 4u);
  InterruptibleSampler again(200, 5);
  again.set_epoch(2);
  EXPECT_EQ(orders.count(drain(again)), 1u) << "an epoch's order depends only on seed and epoch";
}

TEST(Sampler, SetEpochKeepsTheResumedPositionOfTheSameEpochAndRewindRestartsIt) {
  InterruptibleSampler s(50, 1);
  s.set_epoch(3);
  const Indices all = s.epoch_indices();
  s.next(20);
  s.set_epoch(3);
  EXPECT_EQ(s.consumed(), 20);
  s.reset();  // as the data loader does at begin(): mid-epoch, nothing changes
  EXPECT_EQ((*s.next(1))[0], all[20]);
  s.rewind();
  EXPECT_EQ(s.consumed(), 0);
  EXPECT_EQ((*s.next(1))[0], all[0]);
  s.next_epoch();
  EXPECT_EQ(s.epoch(), 4);
  EXPECT_EQ(s.consumed(), 0);
}

TEST(Sampler, WithoutAutoAdvanceOnlyAdvanceMovesTheSavedPosition) {
  InterruptibleSampler s(30, 2, true, /*auto_advance=*/false);
  const Indices all = s.epoch_indices();
  s.next(8);  // read ahead, as prefetching workers do
  s.next(8);
  s.advance(8);  // trained on the first batch only
  EXPECT_EQ(s.consumed(), 8);
  InterruptibleSampler t(30, 2, true, false);
  round_trip(s, t);
  EXPECT_EQ(drain(t, 5), Indices(all.begin() + 8, all.end()));
  s.reset();  // a new loader iteration re-reads from the advanced position
  EXPECT_EQ((*s.next(1))[0], all[8]);
  EXPECT_EQ(error_of([&] { s.advance(23); }),
            "hydro: sampler: advance(23) goes past the end of epoch 0: 22 of this rank's samples are left");
  s.advance(22);
  EXPECT_EQ(s.remaining(), 0u);
}

TEST(Sampler, CopiesShareThePosition) {
  InterruptibleSampler s(10, 0);
  InterruptibleSampler copy = s;
  InterruptibleSampler moved = std::move(copy);
  moved.next(4);
  EXPECT_EQ(s.consumed(), 4);
  EXPECT_EQ(copy.consumed(), 4);
}

TEST(Sampler, ErrorsNameTheSetting) {
  EXPECT_EQ(error_of([] { InterruptibleDistributedSampler(10, 2, 2); }),
            "hydro: invalid argument: sampler: rank=2 must be in [0, num_replicas=2)");
  EXPECT_EQ(error_of([] { InterruptibleDistributedSampler(10, 0, 0); }),
            "hydro: invalid argument: sampler: num_replicas=0 must be at least 1");
  InterruptibleDistributedSampler saved(10, 2, 0, 7, true, false);
  saved.next(3);
  auto load_into = [&](InterruptibleDistributedSampler s) { return error_of([&] { round_trip(saved, s); }); };
  EXPECT_EQ(load_into(InterruptibleDistributedSampler(11, 2, 0, 7, true, false)),
            "hydro: sampler: the checkpoint's dataset size 10 differs from this sampler's 11: resume with the same "
            "dataset size");
  EXPECT_EQ(load_into(InterruptibleDistributedSampler(10, 2, 0, 8, true, false)),
            "hydro: sampler: the checkpoint's seed 7 differs from this sampler's 8: resume with the same seed");
  EXPECT_EQ(load_into(InterruptibleDistributedSampler(10, 2, 0, 7, false, false)),
            "hydro: sampler: the checkpoint's shuffle true differs from this sampler's false: resume with the same "
            "shuffle");
  EXPECT_EQ(load_into(InterruptibleDistributedSampler(10, 2, 0, 7, true, true)),
            "hydro: sampler: the checkpoint's drop_last false differs from this sampler's true: resume with the "
            "same drop_last");
  torch::data::samplers::SequentialSampler other(10);
  torch::serialize::OutputArchive out;
  other.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  InterruptibleSampler s(10);
  EXPECT_EQ(error_of([&] { s.load(in); }),
            "hydro: sampler: the checkpoint holds no interruptible sampler state ('epoch' is missing): was it saved "
            "by another kind of sampler?");
}

TEST(Sampler, AForgedPositionPastTheEpochIsRejected) {
  torch::serialize::OutputArchive out;
  const std::pair<const char*, int64_t> values[] = {
      {"epoch", 0}, {"consumed", 14}, {"seed", 0}, {"size", 10}, {"num_replicas", 4}, {"shuffle", 1}, {"drop_last", 0}};
  for (auto [key, v] : values) out.write(key, torch::tensor(v, torch::kLong));
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  InterruptibleSampler s(10);
  EXPECT_EQ(error_of([&] { s.load(in); }),
            "hydro: invalid argument: sampler: consumed=14 is outside [0, 13] for 10 samples on 4 rank(s)");
}

}  // namespace
}  // namespace hydro
