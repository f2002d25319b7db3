#include "hydro/staging.h"

#include <algorithm>
#include <new>
#include <utility>

#include "hydro/text.h"

namespace hydro {

namespace {

// Each slot starts on a page: a direct write of a slot's bytes needs no realignment.
constexpr uint64_t kSlotAlign = 4096;

uint64_t slot_bytes(uint64_t n) { return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

std::string item_text(size_t item, uint64_t bytes) {
  return "the copy of tensor " + std::to_string(item) + " (" + mib(bytes) + ") to host memory";
}

}  // namespace

Staging::Staging(StagingCalls calls, std::function<void(const std::string&)> log)
    : calls_(std::move(calls)), log_(std::move(log)), pool_(calls_.pin, calls_.unpin) {}

// No copy may still be writing into the arena once it is given back.
Staging::~Staging() { (void)finish(); }

Status Staging::stage(const std::vector<uint64_t>& sizes) {
  (void)finish();  // the last save's copies, whose errors its own ready() reported
  failed_ = Status::OK();
  sizes_ = sizes;
  offsets_.clear();
  waited_.assign(sizes.size(), false);
  uint64_t total = 0;
  for (uint64_t s : sizes) {
    offsets_.push_back(total);
    total += slot_bytes(s);
  }
  Status s = arena(total);
  if (!s.ok()) {
    waited_.assign(sizes.size(), true);
    return failed_ = s;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    s = calls_.copy_out(i, slot(i));
    if (s.ok()) continue;
    std::fill(waited_.begin() + static_cast<std::ptrdiff_t>(i), waited_.end(), true);  // never queued
    (void)finish();                                                                    // those queued before it
    return failed_ = Status::io("queuing " + item_text(i, sizes[i]) + " failed: " + s.message());
  }
  return Status::OK();
}

// The pinned pool where it has room; pageable memory, said once, where pinning fails or does not fit.
Status Staging::arena(uint64_t bytes) {
  if (bytes == 0) return Status::OK();
  if (!pageable_) {
    Status s = pool_.reserve(bytes, calls_.host_available());
    if (s.ok()) return s;
    if (!told_pageable_)
      log_("checkpoint staging: " + s.message() + ": the copies of device tensors go to pageable memory, slower");
    told_pageable_ = true;
  }
  if (pageable_ && pageable_bytes_ >= bytes) return Status::OK();
  pageable_.reset(new (std::nothrow) char[bytes]);
  pageable_bytes_ = pageable_ ? bytes : 0;
  if (!pageable_) return Status::io("no host memory for " + mib(bytes) + " of device tensors' copies");
  return Status::OK();
}

Status Staging::wait_for(size_t item) {
  if (waited_[item]) return failed_;
  waited_[item] = true;
  Status s = calls_.wait(item);
  if (!s.ok() && failed_.ok()) failed_ = Status::io(item_text(item, sizes_[item]) + " failed: " + s.message());
  return failed_;
}

Status Staging::ready(const void* p, size_t n) {
  HYDRO_RETURN_IF_ERROR(failed_);
  if (offsets_.empty() || n == 0) return Status::OK();
  const char* at = static_cast<const char*>(p);
  const char* begin = base();
  const uint64_t end_offset = offsets_.back() + sizes_.back();
  if (at + n <= begin || at >= begin + end_offset) return Status::OK();  // not a slot's bytes
  const uint64_t from = at < begin ? 0 : static_cast<uint64_t>(at - begin);
  const uint64_t to = static_cast<uint64_t>(at + n - begin);
  // The last slot starting at or before `from`, then every one starting before `to`.
  size_t i = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), from) - offsets_.begin());
  for (i = i == 0 ? 0 : i - 1; i < offsets_.size() && offsets_[i] < to; ++i) {
    if (offsets_[i] + sizes_[i] <= from) continue;  // its padding, not its bytes
    HYDRO_RETURN_IF_ERROR(wait_for(i));
  }
  return Status::OK();
}

Status Staging::finish() {
  Status first = failed_;
  for (size_t i = 0; i < waited_.size(); ++i) {
    Status s = wait_for(i);
    if (first.ok()) first = s;
  }
  return first;
}

}  // namespace hydro
