// The ranks' RankStore over libtorch's c10d TCPStore: rank 0 serves it at MASTER_ADDR:MASTER_PORT+1
// (MASTER_PORT itself is left to the user's process group).
#pragma once

#include <memory>

#include "hydro/rank_store.h"
#include "hydro/settings.h"

namespace hydro {

// Throws std::runtime_error naming the address when the store cannot be reached in time.
std::unique_ptr<RankStore> connect_tcp_store(const Settings& settings);

}  // namespace hydro
