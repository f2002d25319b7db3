// A CPU stand-in for a device under a checkpoint's copies (snapshot.h's DeviceCopyCalls; issue 58):
// no GPU is in CI. Its "device tensors" are the double ones. A copy is queued with its destination
// poisoned (NaN) and runs only when waited for, in order, as on a stream: a file written, or a
// resumed tensor read, before its copies were waited for would hold NaNs. device_copies_test.cpp
// uses it, and stand_in_device_module.cpp hands it to the Python tests.
#pragma once

#include <torch/torch.h>

#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "snapshot.h"

namespace hydro::test {

struct StandInDevice {
  std::mutex mu;
  int pins = 0, queued = 0, waited = 0;
  bool present = true, fail_pin = false;
  int fail_wait = -1;    // the copy number whose wait fails, once
  int throw_queue = -1;  // the copy number whose queue throws, once

  DeviceCopyCalls calls() {
    auto stream = std::make_shared<std::vector<std::pair<torch::Tensor, torch::Tensor>>>();
    DeviceCopyCalls c;
    c.present = [this] { return present; };
    c.takes = [](const torch::Tensor& t) { return t.scalar_type() == torch::kDouble; };
    c.pin = [this](uint64_t bytes, void** host) {
      std::lock_guard<std::mutex> lock(mu);
      if (fail_pin) return Status::io("cudaHostAlloc: out of memory");
      ++pins;
      *host = new char[bytes];
      return Status::OK();
    };
    c.unpin = [](void* host, uint64_t) { delete[] static_cast<char*>(host); };
    c.queue = [this, stream](size_t copy, const torch::Tensor& dst, const torch::Tensor& src) {
      std::lock_guard<std::mutex> lock(mu);
      if (static_cast<int>(copy) == throw_queue) {
        throw_queue = -1;
        throw std::runtime_error("the stand-in's queue threw");
      }
      ++queued;
      if (stream->size() <= copy) stream->resize(copy + 1);
      (*stream)[copy] = {dst, src.clone()};  // what the tensor held when the copy was queued
      dst.fill_(std::numeric_limits<double>::quiet_NaN());
      return Status::OK();
    };
    c.wait = [this, stream](size_t copy) {
      std::lock_guard<std::mutex> lock(mu);
      ++waited;
      if (static_cast<int>(copy) == fail_wait) {
        fail_wait = -1;
        return Status::io("cudaEventSynchronize: an illegal memory access was encountered");
      }
      (*stream)[copy].first.copy_((*stream)[copy].second);
      return Status::OK();
    };
    return c;
  }
};

}  // namespace hydro::test
