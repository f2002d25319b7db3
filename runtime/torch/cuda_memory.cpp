// Built only against a libtorch with CUDA (see cuda_memory.h).
#include "cuda_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>

namespace hydro {

bool cuda_cache_release_compiled() { return true; }

void release_cuda_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

unsigned long long cuda_reserved_bytes(int device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return static_cast<unsigned long long>(stats.reserved_bytes[0].current);  // [0]: all pools
}

}  // namespace hydro
