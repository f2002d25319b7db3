// Built only against a libtorch with CUDA (see cuda_memory.h).
#include "cuda_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>

namespace hydro {

bool cuda_cache_release_compiled() { return true; }

void release_cuda_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

}  // namespace hydro
