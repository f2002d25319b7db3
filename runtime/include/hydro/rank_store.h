// The key-value store a job's ranks coordinate through: in the runtime hydro's own, authenticated
// with MUNGE and served by rank 0 at MASTER_PORT + 1 (hydro/tcp_store.h), in the core's tests an
// in-memory one. Every wait is bounded.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "hydro/status.h"

namespace hydro {

class RankStore {
 public:
  virtual ~RankStore() = default;
  virtual Status set(const std::string& key, const std::string& value) = 0;
  // Waits up to `timeout` for `key` to be set. On expiry returns Code::not_found.
  virtual Status get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) = 0;
  // Adds `delta` to the counter `key` (created at 0) and returns the new value.
  virtual Status add(const std::string& key, int64_t delta, int64_t* value) = 0;
  virtual Status remove(const std::string& key) = 0;
};

}  // namespace hydro
