// An in-process RankStore for the core's tests, where ranks are threads (run_ranks). The runtime
// uses hydro's TCP store (hydro/tcp_store.h), which needs munged.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "hydro/rank_store.h"

namespace hydro::test {

class MemoryStore : public RankStore {
 public:
  Status set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> l(mu_);
    kv_[key] = value;
    cv_.notify_all();
    return Status::OK();
  }
  Status get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, timeout, [&] { return kv_.count(key) > 0; })) return Status::not_found("timeout: " + key);
    *value = kv_[key];
    return Status::OK();
  }
  Status add(const std::string& key, int64_t delta, int64_t* value) override {
    std::lock_guard<std::mutex> l(mu_);
    int64_t v = (kv_.count(key) ? std::stoll(kv_[key]) : 0) + delta;
    kv_[key] = std::to_string(v);
    *value = v;
    cv_.notify_all();
    return Status::OK();
  }
  Status remove(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    kv_.erase(key);
    return Status::OK();
  }
  size_t size() {
    std::lock_guard<std::mutex> l(mu_);
    return kv_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

// A group's timeout where every rank comes: they meet as soon as the last has written its files
// (real fsyncs, slow on a loaded disk), so it only bounds a broken test.
inline constexpr std::chrono::milliseconds kEveryRankComes{60000};

// Runs fn(rank) for each rank of `world` on a thread of its own; their Statuses, by rank.
template <typename Fn>
std::vector<Status> run_ranks(int world, Fn fn) {
  std::vector<Status> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace hydro::test
