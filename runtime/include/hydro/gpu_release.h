// Issue 33: a paused process gives its GPU back. `cache` frees the allocator's cached, unused
// blocks; `full` moves the process's device memory to host memory, its NCCL communicators
// suspended first: by hydro's own move (hydro/device_move.h, issue 57) where the memory is hydro's
// allocator's, else (or where that fails) with the CUDA driver's process checkpoint (lock,
// checkpoint; then restore, unlock). The order of the calls and every fallback live here, in plain
// C++: the calls come through DeviceCalls, which a CUDA build fills with the driver's and the tests
// with a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "hydro/host_memory.h"
#include "hydro/status.h"

namespace hydro {

class DeviceMove;

enum class GpuRelease { off, cache, full };
const char* gpu_release_name(GpuRelease g);  // "off", "cache", "full"
bool gpu_release_from_name(const std::string& name, GpuRelease* out);

// What a release calls. Each call that can fail returns a Status naming what failed.
struct DeviceCalls {
  std::function<uint64_t()> device_bytes;       // the process's device memory in use
  std::function<HostRoom()> host_available;     // host memory free for the checkpoint
  std::function<Status()> release_cache;        // the allocator's cached, unused blocks
  std::function<Status()> suspend_collectives;  // NCCL's communicators suspended (or torn down)
  std::function<Status()> resume_collectives;   // ... and back
  // The driver's process checkpoint; all four null where it cannot be made (no helper), and then
  // `full` is hydro's own move alone.
  std::function<Status(std::chrono::milliseconds)> lock;  // the process's CUDA calls held
  std::function<Status()> checkpoint;                     // device state to host memory; the device freed
  std::function<Status()> restore;                        // host memory back to the device
  std::function<Status()> unlock;                         // the process's CUDA calls go on
  std::function<std::chrono::steady_clock::time_point()> now = std::chrono::steady_clock::now;
  // hydro's own move of its allocator's memory, the first choice of `full` where that allocator
  // holds any; null: the driver's process checkpoint alone. Not owned.
  DeviceMove* own_move = nullptr;
};

// Whether `device_bytes` of device state fits in `host_available` with room left: the larger of
// 1 GiB and an eighth of the state stays free, so that the checkpoint never wakes the OOM killer.
bool fits_in_host(uint64_t device_bytes, uint64_t host_available);

class GpuReleaser {
 public:
  GpuReleaser(GpuRelease mode, DeviceCalls calls, std::function<void(const std::string&)> log);

  // At a pause, after the device drain: releases what the mode asks and says what it released.
  // `full` that cannot fit or fails at any step undoes its steps before, releases the cache,
  // logs why, and says `cache`: the job stays paused, never dies of it. `until_freeze` is the time
  // left before the process is frozen (Slurm's SIGSTOP or cgroup freeze, HYDRO_SUSPEND_GRACE after SIGTSTP), if
  // one comes: a frozen process cannot be checkpointed, so `full` goes ahead only when the move,
  // at the rate last measured (or kAssumedRate before any), takes at most 3/4 of that time.
  GpuRelease release(std::chrono::milliseconds lock_timeout,
                     std::optional<std::chrono::milliseconds> until_freeze = std::nullopt);
  // Before any thread goes on: brings back what release() moved. An error means the process's
  // device state is lost (a restore, an unlock or an undo failed): the caller ends the job, to be
  // requeued from its last checkpoint.
  Status restore();
  GpuRelease held() const { return held_; }
  // Bytes per second of the last full release by the driver (lock and checkpoint), and of the
  // last by hydro's own move; kAssumedRate before one.
  uint64_t rate() const { return rate_; }
  uint64_t own_rate() const { return own_rate_; }

  static constexpr uint64_t kAssumedRate = 1ull << 30;  // 1 GiB/s: below the driver's reported speeds

 private:
  // cache_only: the cache freed, and nothing more (release_own says when); not_used: none to
  // move, or the move failed and was undone: the driver's checkpoint may follow.
  enum class Own { moved, cache_only, not_used };
  Own release_own(std::optional<std::chrono::milliseconds> until_freeze);
  std::optional<std::chrono::milliseconds> time_left(std::optional<std::chrono::milliseconds> until_freeze,
                                                     std::chrono::steady_clock::time_point start);
  bool fits_before_freeze(uint64_t bytes, uint64_t rate, std::optional<std::chrono::milliseconds> until_freeze);
  bool release_full(std::chrono::milliseconds lock_timeout, std::optional<std::chrono::milliseconds> until_freeze);
  bool give_up(const std::string& step, const Status& why);
  void undo(const char* step, const std::function<Status()>& call);
  GpuRelease release_cache();
  Own cache_and_idle();
  Status bring_back();

  GpuRelease mode_;
  DeviceCalls calls_;
  std::function<void(const std::string&)> log_;
  GpuRelease held_ = GpuRelease::off;
  uint64_t rate_ = kAssumedRate;
  uint64_t own_rate_ = kAssumedRate;
  bool own_held_ = false;                   // the last full release was hydro's own move
  GpuRelease own_cache_ = GpuRelease::off;  // what release_own's freeing of the cache gave
  Status lost_;                             // an undo that failed: the device state cannot come back
};

}  // namespace hydro
