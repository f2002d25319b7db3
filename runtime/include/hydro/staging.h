// Issue 58: the host side of a checkpoint of device tensors. Each tensor's bytes go to a slot of
// page-locked host memory, pinned once and kept between saves (pinning costs more than the copy:
// hydro/device_move.h's PinnedPool), by a copy queued on a stream of hydro's after the work that
// made the tensor. A writer waits for the copies of the bytes it is about to write only, so the
// file write of one tensor overlaps the copies of the next. Where pinning fails or does not fit
// in host memory, the slots are pageable, logged once. The order and the waits live here in plain
// C++: the calls come through StagingCalls, which a CUDA build fills with its copies and events
// and the tests with a CPU stand-in.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hydro/device_move.h"
#include "hydro/host_memory.h"
#include "hydro/status.h"

namespace hydro {

struct StagingCalls {
  std::function<Status(uint64_t bytes, void** host)> pin;   // page-locked host memory
  std::function<void(void* host, uint64_t bytes)> unpin;    // ... given back
  std::function<HostRoom()> host_available;                 // host memory free, beyond the arena's
  std::function<Status(size_t item, void* host)> copy_out;  // queued: the item's bytes to `host`
  std::function<Status(size_t item)> wait;                  // the item's queued copy done
};

class Staging {
 public:
  Staging(StagingCalls calls, std::function<void(const std::string&)> log);
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Waits for the last save's copies, then queues the copy of each item (`sizes[i]` bytes) into
  // a slot of its own, in order. An error says which item could not be queued; the copies queued
  // before it are waited for.
  Status stage(const std::vector<uint64_t>& sizes);
  char* slot(size_t item) const { return base() + offsets_.at(item); }
  // Waits for the copy of every item whose slot overlaps [p, p + n), once each: a writer calls it
  // before it writes those bytes. Bytes outside the slots (a file's own headers) wait for nothing.
  Status ready(const void* p, size_t n);
  Status finish();  // every copy of the last stage() done
  bool pinned() const { return !pageable_; }
  const PinnedPool& pool() const { return pool_; }

 private:
  char* base() const { return pageable_ ? pageable_.get() : pool_.data(); }
  Status arena(uint64_t bytes);
  Status wait_for(size_t item);

  StagingCalls calls_;
  std::function<void(const std::string&)> log_;
  PinnedPool pool_;
  std::unique_ptr<char[]> pageable_;  // the slots where pinning failed or does not fit
  uint64_t pageable_bytes_ = 0;
  bool told_pageable_ = false;
  std::vector<uint64_t> offsets_, sizes_;
  std::vector<bool> waited_;
  Status failed_;  // a copy that failed: every later ready() says so
};

}  // namespace hydro
