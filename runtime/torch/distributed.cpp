// The job's ranks joined over a TCPStore, and the collectives hydro's helpers make on them. What
// runs those collectives (c10d's Gloo, or hydro's own over the store) is gloo_backend.h's.
#include "hydro/distributed.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstring>
#include <stdexcept>

#include "hydro/hang_watch.h"
#include "hydro/log.h"
#include "hydro/settings.h"
#include "gloo_backend.h"
#include "raise.h"

namespace hydro {
namespace {

std::vector<torch::Tensor> state_of(torch::nn::Module& module) {
  std::vector<torch::Tensor> out = module.parameters();
  for (auto& b : module.buffers()) out.push_back(b);
  return out;
}

}  // namespace

std::shared_ptr<Group> join_gloo_group(std::chrono::milliseconds timeout) {
  auto group = std::make_shared<Group>();
  Status st = DistEnv::from_env(&group->env);
  throw_if_error(st);
  const DistEnv& env = group->env;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0;
    opts.numWorkers = static_cast<size_t>(env.world_size);
    opts.timeout = timeout;
    group->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    group->timeout = timeout;
    Settings settings;
    const bool held = Settings::from_env(&settings).ok() && settings.pause;  // Group::timeout
    group->pg =
        gloo_backend(*group, held ? std::chrono::duration_cast<std::chrono::milliseconds>(kHoldProof) : timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("hydro: joining the Gloo process group at " + where +
                             " (MASTER_ADDR, MASTER_PORT) as rank " + std::to_string(env.rank) + " of " +
                             std::to_string(env.world_size) + ": " + e.what());
  }
  log("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " joined the group at " + where +
      " (collectives: " + gloo_route() + ")");
  return group;
}

void broadcast_parameters(Group& group, torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& t : state_of(module)) {
    std::vector<torch::Tensor> one{t.data()};
    group.pg->broadcast(one, c10d::BroadcastOptions{})->wait();
  }
}

void average_gradients(Group& group, torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (auto& p : module.parameters())
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty() || group.size() == 1) return;
  std::vector<torch::Tensor> flat{torch::cat([&] {
    std::vector<torch::Tensor> v;
    for (auto& g : grads) v.push_back(g.reshape({-1}));
    return v;
  }())};
  group.pg->allreduce(flat)->wait();
  flat[0].div_(group.size());
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat[0].narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

MetricsTracker all_reduce_metrics(Group& group, const MetricsTracker& local) {
  const std::string mine = local.serialize();
  const int n = group.size();
  if (n == 1) return local;
  // Gloo's allgather wants equal sizes: the lengths first, then the texts padded to the longest.
  std::vector<torch::Tensor> len_in{torch::tensor({static_cast<int64_t>(mine.size())}, torch::kInt64)};
  std::vector<std::vector<torch::Tensor>> len_out(1);
  for (int r = 0; r < n; ++r) len_out[0].push_back(torch::empty({1}, torch::kInt64));
  group.pg->allgather(len_out, len_in)->wait();
  int64_t longest = 0;
  for (const auto& t : len_out[0]) longest = std::max(longest, t.item<int64_t>());
  std::vector<torch::Tensor> text_in{torch::zeros({longest}, torch::kUInt8)};
  std::memcpy(text_in[0].data_ptr(), mine.data(), mine.size());
  std::vector<std::vector<torch::Tensor>> text_out(1);
  for (int r = 0; r < n; ++r) text_out[0].push_back(torch::empty({longest}, torch::kUInt8));
  group.pg->allgather(text_out, text_in)->wait();

  std::vector<MetricsTracker> all(n);
  for (int r = 0; r < n; ++r) {
    const auto* p = static_cast<const char*>(text_out[0][r].data_ptr());
    std::string text(p, static_cast<size_t>(len_out[0][r].item<int64_t>()));
    Status st = MetricsTracker::parse(text, "rank " + std::to_string(r) + "'s metrics", &all[r]);
    if (!st.ok()) throw std::runtime_error("hydro: all_reduce_metrics: " + st.message());
  }
  MetricsTracker out = all[0];
  for (int r = 1; r < n; ++r) {
    if (all[r].names() != out.names()) {
      auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
        return "{" + s + "}";
      };
      throw std::runtime_error("hydro: all_reduce_metrics: rank 0 has the metrics " + join(out.names()) + ", rank " +
                               std::to_string(r) + " has " + join(all[r].names()) +
                               ": every rank must add() the same names in an epoch");
    }
    Status st = out.merge(all[r]);
    if (!st.ok()) throw std::runtime_error("hydro: all_reduce_metrics: " + st.message());
  }
  return out;
}

}  // namespace hydro
