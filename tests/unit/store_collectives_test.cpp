// hydro::store_collectives: broadcast, allreduce and allgather over a store alone, three ranks in
// this process (threads) over one HashStore: what join_gloo_group gives a libtorch without gloo
// headers (gloo_backend.h).
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <functional>
#include <thread>

#include "hydro/distributed.h"

namespace hydro {
namespace {

constexpr int kRanks = 3;

// Runs body(rank, collectives) on kRanks threads sharing one store; the store is returned.
c10::intrusive_ptr<c10d::HashStore> on_ranks(const std::function<void(int, Collectives&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(std::chrono::seconds(30));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      auto c = store_collectives(store, r, kRanks);
      body(r, *c);
    });
  for (auto& t : threads) t.join();
  return store;
}

TEST(StoreCollectives, AllreduceAddsInRankOrderSoEveryRankHoldsTheSameBits) {
  // Values whose float sum depends on the order: every rank must still hold one result.
  std::vector<at::Tensor> out(kRanks);
  on_ranks([&](int r, Collectives& c) {
    std::vector<at::Tensor> t{torch::tensor({1e8f, 1.0f, -3.5f}) * (r == 1 ? -1.0f : 1.0f) + 0.25f * r};
    for (int i = 0; i < 5; ++i) c.allreduce(t)->wait();  // five in a row: the keys are reused safely
    out[r] = t[0];
  });
  for (int r = 1; r < kRanks; ++r) EXPECT_TRUE(torch::equal(out[r], out[0])) << "rank " << r;
  // The first allreduce's sum in rank order, then four more sums of that by every rank.
  at::Tensor want = torch::tensor({1e8f, 1.0f, -3.5f});
  want = want + (-want + 0.25f) + (want + 0.5f);
  for (int i = 1; i < 5; ++i) want = want + want + want;
  EXPECT_TRUE(torch::equal(out[0], want));
}

TEST(StoreCollectives, BroadcastGivesEveryRankTheRootsTensorsAndAllgatherEveryRanks) {
  std::vector<at::Tensor> got(kRanks);
  std::vector<std::vector<at::Tensor>> gathered(kRanks);
  on_ranks([&](int r, Collectives& c) {
    std::vector<at::Tensor> t{torch::full({2, 2}, static_cast<double>(r), torch::kFloat64), torch::arange(4) + r};
    c10d::BroadcastOptions from;
    from.rootRank = 2;
    c.broadcast(t, from)->wait();
    got[r] = torch::cat({t[0].reshape({-1}).to(torch::kInt64), t[1]});
    std::vector<at::Tensor> in{torch::tensor({static_cast<int64_t>(10 * r)})};
    std::vector<std::vector<at::Tensor>> all(1);
    for (int s = 0; s < kRanks; ++s) all[0].push_back(torch::empty({1}, torch::kInt64));
    c.allgather(all, in)->wait();
    gathered[r] = all[0];
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(torch::equal(got[r], torch::tensor({2, 2, 2, 2, 2, 3, 4, 5}))) << "rank " << r;
    for (int s = 0; s < kRanks; ++s) EXPECT_EQ(gathered[r][s].item<int64_t>(), 10 * s);
  }
}

TEST(StoreCollectives, TheStoreKeepsNoMoreThanTheLastTwoCollectives) {
  auto store = on_ranks([](int, Collectives& c) {
    std::vector<at::Tensor> t{torch::ones({8})};
    for (int i = 0; i < 50; ++i) c.allreduce(t)->wait();
  });
  EXPECT_LE(store->getNumKeys(), 2 * kRanks);
}

TEST(StoreCollectives, MismatchedShapesAndOtherOpsThrowNamingWhy) {
  std::vector<std::string> errors(kRanks);
  on_ranks([&](int r, Collectives& c) {
    std::vector<at::Tensor> t{torch::ones({r == 0 ? 3 : 2})};
    try {
      c.allreduce(t)->wait();
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < kRanks; ++r)
    EXPECT_NE(errors[r].find("every rank must pass tensors of the same shape"), std::string::npos) << errors[r];
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto c = store_collectives(store, 0, 1);
  std::vector<at::Tensor> t{torch::ones({1})};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  EXPECT_THROW(c->allreduce(t, max), std::runtime_error);
  EXPECT_THROW(store_collectives(store, 1, 1), std::invalid_argument);
}

}  // namespace
}  // namespace hydro
