// Issue 58: the host side of a checkpoint of device tensors. Each tensor is copied into host
// memory of its own that the caller keeps and reuses from save to save (pinning costs more than
// the copy: pin once), page-locked where pinning works and host memory has room for it, pageable
// otherwise, said once. Every copy of a save is queued at once, on a stream of hydro's after the
// work that made its tensor; finish() waits for them in order. The order, the bound and the
// errors live here in plain C++: the calls come through StagingCalls, which a CUDA build fills
// with its copies and events (runtime/torch/cuda_staging.cpp) and the tests with a CPU stand-in.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hydro/host_memory.h"
#include "hydro/status.h"

namespace hydro {

struct StagingCalls {
  std::function<Status(uint64_t bytes, void** host)> pin;  // page-locked host memory
  std::function<void(void* host, uint64_t bytes)> unpin;   // ... given back
  std::function<HostRoom()> host_available;                // host memory free now
  std::function<Status(size_t copy)> queue;                // queued: the caller's copy number `copy`
  std::function<Status(size_t copy)> wait;                 // that copy done
};

class Staging {
 public:
  Staging(StagingCalls calls, std::function<void(const std::string&)> log);
  ~Staging();  // waits for the copies still queued: none may write into a buffer given back
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // `bytes` of host memory for one tensor's copy, given back when its last owner drops it (this
  // Staging may be gone by then). Pinned where pinning works and leaves host memory its margin
  // (fits_in_host); pageable otherwise, the first time with a log line that says why.
  std::shared_ptr<char> buffer(uint64_t bytes, bool* pinned = nullptr);
  // Queues the next copy of this save (numbered from 0 after each finish()), of `bytes`. An error
  // names the copy; the ones queued before it still run, and finish() waits for them.
  Status queue(uint64_t bytes);
  // Waits for every queued copy, in order. The first failure, named; the numbering starts again.
  Status finish();
  size_t queued() const;
  uint64_t pinned_bytes() const { return *pinned_bytes_; }

 private:
  StagingCalls calls_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;        // the copies: queued on the training thread, waited for on another
  std::vector<uint64_t> sizes_;  // of the copies queued since the last finish()
  bool told_pageable_ = false;
  std::shared_ptr<std::atomic<uint64_t>> pinned_bytes_ = std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace hydro
