// The key-value store a job's ranks coordinate through: in the runtime hydro's own, authenticated
// with MUNGE and served by rank 0 at MASTER_PORT + 1 (hydro/tcp_store.h), in the core's tests an
// in-memory one. Every wait is bounded.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

  // Waits up to `timeout` in all for every one of `keys`: OK once all are set. On expiry returns
  // Code::not_found naming the first key missing, with `values` holding the ones set (nullopt for
  // the others). hydro's TCP store answers it in one round trip; this default asks key by key.
  virtual Status get_all(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                         std::vector<std::optional<std::string>>* values) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Status first_missing;
    values->assign(keys.size(), std::nullopt);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      std::string v;
      Status s = get(keys[i], std::max(left, std::chrono::milliseconds(0)), &v);
      if (s.ok())
        (*values)[i] = std::move(v);
      else if (s.code() != Code::not_found)
        return s;
      else if (first_missing.ok())
        first_missing = s;
    }
    return first_missing;
  }
};

}  // namespace hydro
