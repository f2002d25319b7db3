// The one piece of the GPU path that needs libtorch's CUDA library (c10_cuda): giving cached
// device memory back to the driver while paused. Built from cuda_memory.cpp when the libtorch
// hydro is built against has CUDA, and from cuda_memory_none.cpp when it does not (Debian's).
// The drain itself (torch::cuda::synchronize) and the CUDA RNG state need no CUDA headers and
// are compiled into every build.
#pragma once

#include "hydro/device_move.h"
#include "hydro/status.h"

namespace hydro {

// True when this build can release cached device memory (libtorch with CUDA).
bool cuda_cache_release_compiled();

// Returns every unused block of libtorch's CUDA caching allocator to the driver
// (c10::cuda::CUDACachingAllocator::emptyCache): none while hydro's pool is routed to
// (route_cuda_allocations), whose idle segments the move releases instead. Does nothing when not
// compiled.
void release_cuda_cache();

// Issue 57, HYDRO_GPU_ALLOCATOR=hydro: from now on every allocation libtorch's caching allocator
// makes on the current device, from any thread (backward's autograd threads too), goes to a pool of
// its own whose segments hydro's allocator maps (runtime/cuda/vmm_allocator.h), as CUDA graph
// capture routes a stream's. Initializes CUDA on that device. *calls moves those segments
// (hydro/device_move.h); *device says which device. Once a process: a second call gives the same.
// An error (a libtorch without CUDA or older than 2.15, a driver that cannot load) leaves libtorch's
// own allocator and says why.
Status route_cuda_allocations(MoveCalls* calls, int* device);

// The device memory libtorch's allocator holds on `device` (its reserved bytes, in use or cached);
// 0 when not compiled.
unsigned long long cuda_reserved_bytes(int device);

}  // namespace hydro
