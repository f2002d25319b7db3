// Gloo process groups over a TCPStore: the one translation unit that includes Gloo's headers.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include "hydro/distributed.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

#include "hydro/log.h"

namespace hydro {
namespace {

bool loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }

std::vector<torch::Tensor> state_of(torch::nn::Module& module) {
  std::vector<torch::Tensor> out = module.parameters();
  for (auto& b : module.buffers()) out.push_back(b);
  return out;
}

}  // namespace

std::shared_ptr<Group> join_gloo_group(std::chrono::milliseconds timeout) {
  auto group = std::make_shared<Group>();
  Status st = DistEnv::from_env(&group->env);
  if (!st.ok()) throw std::runtime_error("hydro: " + st.to_string());
  const DistEnv& env = group->env;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = env.rank == 0;
    opts.numWorkers = static_cast<size_t>(env.world_size);
    opts.timeout = timeout;
    group->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo->devices.push_back(loopback(env.master_addr)
                                ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                : c10d::ProcessGroupGloo::createDefaultDevice());
    group->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(group->store, env.rank, env.world_size, gloo);
  } catch (const std::exception& e) {
    throw std::runtime_error("hydro: joining the Gloo process group at " + where + " (MASTER_ADDR, MASTER_PORT) as rank " +
                             std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ": " + e.what());
  }
  log("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " joined the Gloo group at " +
      where);
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

}  // namespace hydro
