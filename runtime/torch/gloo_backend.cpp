// join_gloo_group's collectives: c10d's ProcessGroupGloo, built against the gloo headers that this
// libtorch ships beside its own (gloo_backend.h): the one translation unit that includes them.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "gloo_backend.h"

namespace hydro {
namespace {

bool loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }

}  // namespace

c10::intrusive_ptr<Collectives> gloo_backend(const Group& group, std::chrono::milliseconds timeout) {
  auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
  gloo->devices.push_back(loopback(group.env.master_addr) ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                          : c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(group.store, group.env.rank, group.env.world_size, gloo);
}

std::string gloo_route() { return "Gloo"; }

}  // namespace hydro
