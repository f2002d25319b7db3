// The one piece of the GPU path that needs libtorch's CUDA library (c10_cuda): giving cached
// device memory back to the driver while paused. Built from cuda_memory.cpp when the libtorch
// hydro is built against has CUDA, and from cuda_memory_none.cpp when it does not (Debian's).
// The drain itself (torch::cuda::synchronize) and the CUDA RNG state need no CUDA headers and
// are compiled into every build.
#pragma once

namespace hydro {

// True when this build can release cached device memory (libtorch with CUDA).
bool cuda_cache_release_compiled();

// Returns every unused block of libtorch's CUDA caching allocator to the driver
// (c10::cuda::CUDACachingAllocator::emptyCache). Does nothing when not compiled.
void release_cuda_cache();

// The device memory libtorch's allocator holds on `device` (its reserved bytes, in use or cached);
// 0 when not compiled.
unsigned long long cuda_reserved_bytes(int device);

}  // namespace hydro
