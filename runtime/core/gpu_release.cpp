#include "hydro/gpu_release.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "hydro/device_move.h"
#include "hydro/text.h"

namespace hydro {

namespace {

constexpr uint64_t kMinHostRoom = 1ull << 30;

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", s);
  return text;
}

uint64_t host_room(uint64_t device_bytes) { return std::max(kMinHostRoom, device_bytes / 8); }

// Bytes per second of a move of `bytes` that took `took_us`; `previous` where no time was measured.
uint64_t rate_of(uint64_t bytes, int64_t took_us, uint64_t previous) {
  if (took_us <= 0) return previous;
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(bytes) * 1e6 / static_cast<double>(took_us)));
}

}  // namespace

const char* gpu_release_name(GpuRelease g) {
  switch (g) {
    case GpuRelease::off: return "off";
    case GpuRelease::cache: return "cache";
    case GpuRelease::full: return "full";
  }
  return "off";
}

bool gpu_release_from_name(const std::string& name, GpuRelease* out) {
  for (GpuRelease g : {GpuRelease::off, GpuRelease::cache, GpuRelease::full}) {
    if (name == gpu_release_name(g)) {
      *out = g;
      return true;
    }
  }
  return false;
}

bool fits_in_host(uint64_t device_bytes, uint64_t host_available) {
  return host_available >= device_bytes && host_available - device_bytes >= host_room(device_bytes);
}

GpuReleaser::GpuReleaser(GpuRelease mode, DeviceCalls calls, std::function<void(const std::string&)> log)
    : mode_(mode), calls_(std::move(calls)), log_(std::move(log)) {}

GpuRelease GpuReleaser::release(std::chrono::milliseconds lock_timeout,
                                std::optional<std::chrono::milliseconds> until_freeze) {
  held_ = GpuRelease::off;
  own_held_ = false;
  if (mode_ == GpuRelease::full) {
    const auto start = calls_.now();
    switch (release_own(until_freeze)) {
      case Own::moved: return held_ = GpuRelease::full;
      case Own::cache_only: return held_ = own_cache_;
      case Own::not_used: break;
    }
    if (calls_.lock && release_full(lock_timeout, time_left(until_freeze, start))) return held_ = GpuRelease::full;
  }
  if (mode_ != GpuRelease::off) held_ = release_cache();
  return held_;
}

// What is left of `until_freeze`, counted from `start`: an own move that failed took some of it.
std::optional<std::chrono::milliseconds> GpuReleaser::time_left(std::optional<std::chrono::milliseconds> until_freeze,
                                                                std::chrono::steady_clock::time_point start) {
  if (!until_freeze) return until_freeze;
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(calls_.now() - start);
  return std::max(std::chrono::milliseconds(0), *until_freeze - spent);
}

// hydro's own move, where its allocator holds memory: the allocator's cache freed first, then plain
// copies at the link's rate of the segments that hold tensors, with no lock (the idle ones released
// with no copy). cache_only (the cache and the idle segments freed, own_cache_ says how it went):
// too slow for the freeze, where the driver's checkpoint is slower still; NCCL that would not
// suspend; or device memory lost by a failed undo, which the restore reports.
GpuReleaser::Own GpuReleaser::release_own(std::optional<std::chrono::milliseconds> until_freeze) {
  if (!calls_.own_move || calls_.own_move->mapped_bytes() == 0) return Own::not_used;
  own_cache_ = release_cache();
  if (calls_.own_move->mapped_bytes() == 0) return Own::not_used;  // the cache held all of it: the rest is the driver's
  if (!lost_.ok() || calls_.own_move->lost()) return Own::cache_only;
  // Idle segments (the allocator's cache, kept while its pool is in use) are released with no copy.
  if (!fits_before_freeze(calls_.own_move->data_bytes(), own_rate_, until_freeze)) return cache_and_idle();
  Status s = calls_.suspend_collectives();
  if (!s.ok()) {
    give_up("suspending the NCCL communicators", s);
    return cache_and_idle();
  }
  const auto start = calls_.now();
  s = calls_.own_move->release();
  if (!s.ok()) {
    undo("resuming the NCCL communicators", calls_.resume_collectives);
    if (!lost_.ok() || calls_.own_move->lost()) return Own::cache_only;
    const bool driver = static_cast<bool>(calls_.lock);  // none without the helper
    log_("gpu_release=full: hydro's move of its allocator's memory failed (" + s.message() +
         (driver ? "): the driver's process checkpoint instead" : "): releasing the cache only"));
    return driver ? Own::not_used : cache_and_idle();
  }
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(calls_.now() - start).count();
  if (calls_.own_move->moved_bytes() > 0) own_rate_ = rate_of(calls_.own_move->moved_bytes(), took, own_rate_);
  own_held_ = true;
  return Own::moved;
}

bool GpuReleaser::fits_before_freeze(uint64_t bytes, uint64_t rate,
                                     std::optional<std::chrono::milliseconds> until_freeze) {
  if (!until_freeze) return true;
  const double need_s = static_cast<double>(bytes) / static_cast<double>(rate);
  const double left_s = static_cast<double>(until_freeze->count()) / 1000.0;
  if (need_s <= left_s * 0.75) return true;
  log_("gpu_release=full: moving " + mib(bytes) + " at " + mib(rate) + "/s takes about " + seconds(need_s) +
       ", and the process is frozen in " + seconds(left_s) +
       " (Slurm's suspend): releasing the cache only (hydroctl pause leaves it the time it needs)");
  return false;
}

bool GpuReleaser::release_full(std::chrono::milliseconds lock_timeout,
                               std::optional<std::chrono::milliseconds> until_freeze) {
  const uint64_t bytes = calls_.device_bytes();
  const HostRoom available = calls_.host_available();
  if (!fits_in_host(bytes, available.bytes)) {
    log_("gpu_release=full: the device state (" + mib(bytes) + ") does not fit in host memory (" +
         mib(available.bytes) + " available, bound by " + available.bound_by + "; " + mib(host_room(bytes)) +
         " kept free): releasing the cache only");
    return false;
  }
  if (!fits_before_freeze(bytes, rate_, until_freeze)) return false;
  if (until_freeze) lock_timeout = std::min(lock_timeout, *until_freeze / 4);
  const auto start = calls_.now();
  Status s = calls_.suspend_collectives();
  if (!s.ok()) return give_up("suspending the NCCL communicators", s);
  s = calls_.lock(lock_timeout);
  if (!s.ok()) {
    undo("resuming the NCCL communicators", calls_.resume_collectives);
    return give_up("locking the process's CUDA calls", s);
  }
  s = calls_.checkpoint();
  if (!s.ok()) {
    undo("unlocking the process's CUDA calls", calls_.unlock);
    undo("resuming the NCCL communicators", calls_.resume_collectives);
    return give_up("moving the device state to host memory", s);
  }
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(calls_.now() - start).count();
  rate_ = rate_of(bytes, took, rate_);
  log_("gpu_release=full: " + mib(bytes) + " of device state moved to host memory in " + seconds(took / 1e6) +
       "; the GPU is free");
  return true;
}

bool GpuReleaser::give_up(const std::string& step, const Status& why) {
  log_("gpu_release=full failed " + step + " (" + why.message() + "): releasing the cache only");
  return false;
}

void GpuReleaser::undo(const char* step, const std::function<Status()>& call) {
  Status s = call();
  if (s.ok() || !lost_.ok()) return;
  lost_ = Status::io(std::string("gpu_release=full: ") + step + " after a failed release failed (" + s.message() +
                     "): the device state cannot come back");
  log_(lost_.message());
}

// The cache alone: a pool that hydro's allocator feeds keeps its free blocks while it is in use
// (libtorch's emptyCache frees none there), so its idle segments are released too.
GpuReleaser::Own GpuReleaser::cache_and_idle() {
  Status s = calls_.own_move->release_idle();
  if (!s.ok()) log_("gpu_release: releasing the idle segments of hydro's allocator failed (" + s.message() + ")");
  if (s.ok() && calls_.own_move->holding()) own_cache_ = GpuRelease::cache;
  return Own::cache_only;
}

GpuRelease GpuReleaser::release_cache() {
  Status s = calls_.release_cache();
  if (s.ok()) return GpuRelease::cache;
  log_("gpu_release: freeing the allocator's cached memory failed (" + s.message() + ")");
  return GpuRelease::off;
}

Status GpuReleaser::restore() {
  const GpuRelease held = std::exchange(held_, GpuRelease::off);
  HYDRO_RETURN_IF_ERROR(lost_);
  if (calls_.own_move) {  // its memory back; or an error kept from an undo that failed
    Status s = calls_.own_move->restore();
    if (!s.ok()) return lost_ = s;
  }
  if (held != GpuRelease::full) return Status::OK();
  if (!std::exchange(own_held_, false)) return bring_back();
  Status s = calls_.resume_collectives();
  if (!s.ok()) return lost_ = Status::io("gpu_release=full: resuming the NCCL communicators failed: " + s.message());
  return Status::OK();
}

Status GpuReleaser::bring_back() {
  const auto start = calls_.now();
  Status s = calls_.restore();
  if (!s.ok()) return lost_ = Status::io("gpu_release=full: restoring the device state failed: " + s.message());
  s = calls_.unlock();
  if (!s.ok()) return lost_ = Status::io("gpu_release=full: unlocking the process's CUDA calls failed: " + s.message());
  s = calls_.resume_collectives();
  if (!s.ok()) return lost_ = Status::io("gpu_release=full: resuming the NCCL communicators failed: " + s.message());
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(calls_.now() - start).count();
  log_("gpu_release=full: the device state is back on the GPU in " + seconds(took / 1e6));
  return Status::OK();
}

}  // namespace hydro
