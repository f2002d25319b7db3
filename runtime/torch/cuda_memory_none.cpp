// Built against a CPU-only libtorch (see cuda_memory.h): there is no device memory to release,
// and no device tensor to stage for a checkpoint.
#include "cuda_memory.h"
#include "snapshot.h"

namespace hydro {

bool cuda_cache_release_compiled() { return false; }

void release_cuda_cache() {}

unsigned long long cuda_reserved_bytes(int) { return 0; }

DeviceCopyCalls cuda_device_calls() { return {}; }  // no tensor of a device: every copy is torch's

Status route_cuda_allocations(MoveCalls*, int*) {
  return Status::not_found("hydro was built against a libtorch without CUDA");
}

}  // namespace hydro
