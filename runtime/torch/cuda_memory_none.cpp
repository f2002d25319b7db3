// Built against a CPU-only libtorch (see cuda_memory.h): there is no device memory to release.
#include "cuda_memory.h"

namespace hydro {

bool cuda_cache_release_compiled() { return false; }

void release_cuda_cache() {}

unsigned long long cuda_reserved_bytes(int) { return 0; }

Status route_cuda_allocations(MoveCalls*, int*) {
  return Status::not_found("hydro was built against a libtorch without CUDA");
}

}  // namespace hydro
