// Issue 58: the CUDA side of hydro/staging.h. Device tensors are copied to its pinned slots on a
// stream of hydro's, each after an event of the stream that produced it (not a device-wide sync),
// with an event per slot that ready() waits for. Built only against a libtorch with CUDA. The save
// paths do not use it yet; the GPU check does (tests/gpu/staging_check.cpp).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hydro/staging.h"

namespace hydro {

class CudaStaging {
 public:
  explicit CudaStaging(std::function<void(const std::string&)> log);
  ~CudaStaging();
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;

  // Waits for the last stage's copies, then queues the copy of each tensor (on a CUDA device;
  // made contiguous first) to a slot of its own. `host` gets a CPU tensor over each slot, valid
  // until the next stage(), whose bytes are there once ready() said so for them.
  Status stage(const std::vector<at::Tensor>& tensors, std::vector<at::Tensor>* host);
  Status ready(const void* p, size_t n) { return staging_.ready(p, n); }
  Status finish() { return staging_.finish(); }
  bool pinned() const { return staging_.pinned(); }

 private:
  StagingCalls calls();
  Status copy_out(size_t item, void* host);
  Status wait(size_t item);
  void drop_events();

  std::vector<at::Tensor> sources_;
  std::vector<cudaEvent_t> done_;                 // one per slot, recorded after its copy
  std::map<int, c10::cuda::CUDAStream> streams_;  // hydro's copy stream on each device
  Staging staging_;                               // last: destroyed first, its finish() uses the above
};

}  // namespace hydro
