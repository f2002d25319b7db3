// join_gloo_group's collectives where this libtorch ships no gloo headers (gloo_backend.h):
// hydro's over the group's TCPStore.
#include "gloo_backend.h"

namespace hydro {

c10::intrusive_ptr<Collectives> gloo_backend(const Group& group, std::chrono::milliseconds timeout) {
  group.store->setTimeout(timeout);
  return store_collectives(group.store, group.env.rank, group.env.world_size);
}

std::string gloo_route() {
  return "hydro's collectives over the TCPStore: this libtorch (" TORCH_VERSION ") ships no gloo headers";
}

}  // namespace hydro
