// Issue 33: a paused process gives its GPU back. `cache` frees the allocator's cached, unused
// blocks; `full` moves the process's whole device state to host memory with the CUDA driver's
// process checkpoint (lock, checkpoint; then restore, unlock), its NCCL communicators suspended
// first. The order of the calls and every fallback live here, in plain C++: the calls come through
// DeviceCalls, which a CUDA build fills with the driver's and the tests with a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "hydro/status.h"

namespace hydro {

enum class GpuRelease { off, cache, full };
const char* gpu_release_name(GpuRelease g);  // "off", "cache", "full"
bool gpu_release_from_name(const std::string& name, GpuRelease* out);

// What a release calls. Each call that can fail returns a Status naming what failed.
struct DeviceCalls {
  std::function<uint64_t()> device_bytes;                 // the process's device memory in use
  std::function<uint64_t()> host_available;               // host memory free for the checkpoint (MemAvailable)
  std::function<Status()> release_cache;                  // the allocator's cached, unused blocks
  std::function<Status()> suspend_collectives;            // NCCL's communicators suspended (or torn down)
  std::function<Status()> resume_collectives;             // ... and back
  std::function<Status(std::chrono::milliseconds)> lock;  // the process's CUDA calls held
  std::function<Status()> checkpoint;                     // device state to host memory; the device freed
  std::function<Status()> restore;                        // host memory back to the device
  std::function<Status()> unlock;                         // the process's CUDA calls go on
};

// Whether `device_bytes` of device state fits in `host_available` with room left: the larger of
// 1 GiB and an eighth of the state stays free, so that the checkpoint never wakes the OOM killer.
bool fits_in_host(uint64_t device_bytes, uint64_t host_available);

class GpuReleaser {
 public:
  GpuReleaser(GpuRelease mode, DeviceCalls calls, std::function<void(const std::string&)> log);

  // At a pause, after the device drain: releases what the mode asks and says what it released.
  // `full` that cannot fit or fails at any step undoes its steps before, releases the cache,
  // logs why, and says `cache`: the job stays paused, never dies of it.
  GpuRelease release(std::chrono::milliseconds lock_timeout);
  // Before any thread goes on: brings back what release() moved. An error means the process's
  // device state is lost (a restore, an unlock or an undo failed): the caller ends the job, to be
  // requeued from its last checkpoint.
  Status restore();
  GpuRelease held() const { return held_; }

 private:
  bool release_full(std::chrono::milliseconds lock_timeout);
  bool give_up(const std::string& step, const Status& why);
  void undo(const char* step, const std::function<Status()>& call);
  GpuRelease release_cache();
  Status bring_back();

  GpuRelease mode_;
  DeviceCalls calls_;
  std::function<void(const std::string&)> log_;
  GpuRelease held_ = GpuRelease::off;
  Status lost_;  // an undo that failed: the device state cannot come back
};

}  // namespace hydro
