#include "hydro/staging.h"

#include <new>
#include <utility>

#include "hydro/gpu_release.h"
#include "hydro/text.h"

namespace hydro {

namespace {

std::string copy_text(size_t copy, uint64_t bytes) {
  return "the copy of device tensor " + std::to_string(copy) + " (" + mib(bytes) + ") to host memory";
}

}  // namespace

Staging::Staging(StagingCalls calls, std::function<void(const std::string&)> log)
    : calls_(std::move(calls)), log_(std::move(log)) {}

Staging::~Staging() { (void)finish(); }

std::shared_ptr<char> Staging::buffer(uint64_t bytes, bool* pinned) {
  if (pinned) *pinned = false;
  const HostRoom room = calls_.host_available();
  Status why;
  if (!fits_in_host(bytes, room.bytes)) {
    why = Status::io("pinning " + mib(bytes) + " of host memory does not fit: " + mib(room.bytes) +
                     " available, bound by " + room.bound_by);
  } else {
    void* p = nullptr;
    why = calls_.pin(bytes, &p);
    if (why.ok()) {
      if (pinned) *pinned = true;
      *pinned_bytes_ += bytes;
      return std::shared_ptr<char>(static_cast<char*>(p),
                                   [unpin = calls_.unpin, bytes, total = pinned_bytes_](char* q) {
                                     unpin(q, bytes);
                                     *total -= bytes;
                                   });
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!told_pageable_)
    log_("checkpoint staging: " + why.message() + ": copies of device tensors go to pageable memory, slower");
  told_pageable_ = true;
  return std::shared_ptr<char>(new (std::nothrow) char[bytes ? bytes : 1], std::default_delete<char[]>());
}

Status Staging::queue(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t copy = sizes_.size();
  Status s = calls_.queue(copy);
  if (!s.ok()) return Status::io("queuing " + copy_text(copy, bytes) + " failed: " + s.message());
  sizes_.push_back(bytes);
  return Status::OK();
}

Status Staging::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  Status first;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    Status s = calls_.wait(i);
    if (!s.ok() && first.ok()) first = Status::io(copy_text(i, sizes_[i]) + " failed: " + s.message());
  }
  sizes_.clear();
  return first;
}

size_t Staging::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sizes_.size();
}

}  // namespace hydro
