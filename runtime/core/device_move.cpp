#include "hydro/device_move.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "hydro/gpu_release.h"
#include "hydro/text.h"

namespace hydro {

namespace {

std::string segment_text(const Segment& s) {
  char text[64];
  std::snprintf(text, sizeof text, "the segment at 0x%llx (%llu bytes)", static_cast<unsigned long long>(s.address),
                static_cast<unsigned long long>(s.bytes));
  return text;
}

// The bytes of `segments`, or of those that are not idle only.
uint64_t bytes_of(const std::vector<Segment>& segments, bool data_only = false) {
  uint64_t total = 0;
  for (const Segment& s : segments)
    if (!data_only || !s.idle) total += s.bytes;
  return total;
}

double seconds_since(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

// "N MiB in T s (R GiB/s)"
std::string rate_text(uint64_t bytes, double s) {
  char text[96];
  if (s > 0) {
    std::snprintf(text, sizeof text, "%s in %.3f s (%.1f GiB/s)", mib(bytes).c_str(), s,
                  static_cast<double>(bytes) / s / (1ull << 30));
  } else {
    std::snprintf(text, sizeof text, "%s", mib(bytes).c_str());
  }
  return text;
}

}  // namespace

PinnedPool::PinnedPool(std::function<Status(uint64_t, void**)> pin, std::function<void(void*, uint64_t)> unpin)
    : pin_(std::move(pin)), unpin_(std::move(unpin)) {}

PinnedPool::~PinnedPool() {
  if (data_) unpin_(data_, capacity_);
}

Status PinnedPool::reserve(uint64_t bytes, const HostRoom& room) {
  if (bytes <= capacity_) return Status::OK();
  const uint64_t free = room.bytes + capacity_;  // what the pool holds comes back before it grows
  uint64_t want = bytes + bytes / 8;
  if (!fits_in_host(want, free)) want = bytes;
  if (!fits_in_host(want, free)) {
    return Status::io("pinning " + mib(bytes) + " of host memory does not fit: " + mib(free) + " available, bound by " +
                      room.bound_by);
  }
  if (data_) unpin_(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  void* p = nullptr;
  Status s = pin_(want, &p);
  if (!s.ok()) return Status::io("pinning " + mib(want) + " of host memory failed: " + s.message());
  data_ = p;
  capacity_ = want;
  ++pins_;
  return Status::OK();
}

DeviceMove::DeviceMove(MoveCalls calls, std::function<void(const std::string&)> log)
    : calls_(std::move(calls)), log_(std::move(log)), pool_(calls_.pin, calls_.unpin) {}

uint64_t DeviceMove::moved_bytes() const { return bytes_of(moved_, true); }

uint64_t DeviceMove::mapped_bytes() const { return bytes_of(calls_.segments()); }

uint64_t DeviceMove::data_bytes() const { return bytes_of(mapped_now(), true); }

std::vector<Segment> DeviceMove::mapped_now() const {
  std::vector<Segment> out = calls_.segments();
  if (!calls_.idle) return out;
  const std::vector<uint64_t> idle = calls_.idle();
  for (Segment& s : out) s.idle = std::find(idle.begin(), idle.end(), s.address) != idle.end();
  return out;
}

Status DeviceMove::prepare(uint64_t bytes) { return pool_.reserve(bytes, calls_.host_available()); }

Status DeviceMove::release() {
  HYDRO_RETURN_IF_ERROR(lost_);
  if (holding()) return Status::invalid_argument("the device memory is on the host already");
  const auto start = calls_.now();
  moved_ = mapped_now();
  Status s = pool_.reserve(moved_bytes(), calls_.host_available());
  if (s.ok()) s = copy_all_out();
  if (s.ok()) s = release_each();
  if (!s.ok()) {
    moved_.clear();
    return s;
  }
  const uint64_t idle = bytes_of(moved_) - moved_bytes();
  log_("gpu_release=full: " + rate_text(moved_bytes(), seconds_since(start, calls_.now())) + " of device memory in " +
       std::to_string(moved_.size()) + " segments moved to pinned host memory (" + mib(idle) +
       " of them idle, released with no copy); their addresses stay reserved");
  return Status::OK();
}

Status DeviceMove::release_idle() {
  HYDRO_RETURN_IF_ERROR(lost_);
  if (holding()) return Status::invalid_argument("the device memory is on the host already");
  for (const Segment& s : mapped_now())
    if (s.idle) moved_.push_back(s);
  Status s = release_each();
  if (!s.ok()) moved_.clear();
  if (s.ok() && holding()) log_("gpu_release: " + mib(bytes_of(moved_)) + " of idle device memory released");
  return s;
}

// Queues every segment's copy, then waits for them all, even after a copy that could not be
// queued: none may still run once the caller goes on.
Status DeviceMove::copy_all_out() {
  Status failed;
  uint64_t offset = 0;
  for (const Segment& seg : moved_) {
    if (seg.idle) continue;
    Status s = calls_.copy_out(seg, pool_.data() + offset);
    if (!s.ok()) {
      failed = Status::io("copying " + segment_text(seg) + " to host memory failed: " + s.message());
      break;
    }
    offset += seg.bytes;
  }
  Status waited = calls_.wait_copies();
  HYDRO_RETURN_IF_ERROR(failed);
  if (!waited.ok()) return Status::io("the copies to host memory failed: " + waited.message());
  return Status::OK();
}

// Releases each segment's physical memory; one that cannot be released has the ones before it
// mapped and filled again.
Status DeviceMove::release_each() {
  for (size_t i = 0; i < moved_.size(); ++i) {
    Status s = calls_.unmap(moved_[i]);
    if (s.ok()) continue;
    (void)refill(i);
    return Status::io("releasing " + segment_text(moved_[i]) + " failed: " + s.message());
  }
  return Status::OK();
}

// Maps the first `count` segments again and copies their bytes back from the pool.
Status DeviceMove::refill(size_t count) {
  uint64_t offset = 0;
  for (size_t i = 0; i < count && lost_.ok(); ++i) {
    Status s = calls_.map(moved_[i]);
    if (!s.ok()) note_lost("mapping " + segment_text(moved_[i]) + " again", s);
    if (moved_[i].idle) continue;
    if (s.ok()) s = calls_.copy_in(moved_[i], pool_.data() + offset);
    if (!s.ok()) note_lost("copying " + segment_text(moved_[i]) + " back", s);
    offset += moved_[i].bytes;
  }
  Status waited = calls_.wait_copies();
  if (!waited.ok()) note_lost("the copies back to the device", waited);
  return lost_;
}

void DeviceMove::note_lost(const std::string& step, const Status& why) {
  if (!lost_.ok()) return;
  lost_ = Status::io("gpu_release=full: " + step + " failed (" + why.message() + "): the device memory is lost");
  log_(lost_.message());
}

Status DeviceMove::restore() {
  HYDRO_RETURN_IF_ERROR(lost_);
  if (!holding()) return Status::OK();
  const auto start = calls_.now();
  const uint64_t bytes = moved_bytes();
  Status s = refill(moved_.size());
  moved_.clear();
  HYDRO_RETURN_IF_ERROR(s);
  log_("gpu_release=full: " + rate_text(bytes, seconds_since(start, calls_.now())) +
       " of device memory back on the GPU, at the same addresses");
  return Status::OK();
}

}  // namespace hydro
