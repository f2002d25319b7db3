// The collectives that join_gloo_group gives the job's ranks. cmake/HydroTorch.cmake picks one of
// two files: gloo_backend.cpp (c10d's ProcessGroupGloo), where the libtorch ships the gloo headers
// it was built with beside its own (Debian's libtorch-dev with libgloo-dev); otherwise
// gloo_backend_none.cpp (hydro::store_collectives over the same TCPStore: PyPI's wheels ship
// ProcessGroupGloo.hpp without the gloo headers it includes, and another gloo's would match its
// layout only by luck).
#pragma once

#include <chrono>
#include <string>

#include "hydro/distributed.h"

namespace hydro {

// The ranks' collectives over group.store (group.env: rank and size), each bounded by `timeout`.
c10::intrusive_ptr<Collectives> gloo_backend(const Group& group, std::chrono::milliseconds timeout);

// What gloo_backend gives, for hydro's log: "Gloo", or why not.
std::string gloo_route();

}  // namespace hydro
