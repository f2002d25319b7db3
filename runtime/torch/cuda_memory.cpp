// Built only against a libtorch with CUDA (see cuda_memory.h).
#include "cuda_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/version.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hydro/log.h"
#include "hydro/text.h"

// Routing every thread's allocations to a pool whose segments come from another allocator: a
// MemPool over a CUDAPluggableAllocator (use_mem_pool's per-thread routing, torch PR #153356, is the
// same call with a filter of one thread). From torch 2.15, the one it is built and checked against:
// how older allocators treat a pool routed for a whole run (graph capture's routing, meant to be
// brief) was not checked, and their MemPool and snapshot take other arguments.
#if (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)) && \
    __has_include(<ATen/cuda/MemPool.h>)
#include <ATen/Context.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include "vmm_allocator.h"
#define HYDRO_CUDA_POOL_ROUTING 1
#endif

namespace hydro {

#ifdef HYDRO_CUDA_POOL_ROUTING
namespace {

using c10::cuda::CUDACachingAllocator::CUDAAllocator;

// The pool hydro's allocator feeds, and what feeds it: kept for the process's life, since its
// blocks may be in use until the end (never destroyed: a tensor freed at exit still returns to it).
struct HydroPool {
  std::mutex mutex;
  std::shared_ptr<CUDAAllocator> allocator;
  std::unique_ptr<at::cuda::MemPool> pool;
  c10::DeviceIndex device = 0;
};

HydroPool& hydro_pool() {
  static HydroPool* p = new HydroPool;
  return *p;
}

// The segments of hydro's pool that hold no tensor, by address: each is one of hydro's allocations
// (the caching allocator asks one per segment).
std::vector<uint64_t> idle_segments(const at::cuda::MempoolId_t& pool) {
  std::vector<uint64_t> idle;
  for (const auto& seg : c10::cuda::CUDACachingAllocator::snapshot(pool, /*include_traces=*/false).segments)
    if (seg.owner_private_pool_id == pool && seg.active_size == 0) idle.push_back(seg.address);
  return idle;
}

// Kept in `p` only once routed: a throw on the way leaves nothing half done.
Status route_locked(HydroPool& p) {
  VmmAllocator* vmm = VmmAllocator::process();
  if (!vmm) return Status::not_found("hydro's allocator cannot load the CUDA driver (logged above)");
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);  // the caching allocator, sized by the devices
  const c10::DeviceIndex device = c10::cuda::current_device();
  auto allocator = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
      [](size_t bytes, int on, cudaStream_t stream) {
        return hydro_vmm_malloc(static_cast<ssize_t>(bytes), on, stream);
      },
      [](void* address, size_t bytes, int on, cudaStream_t stream) {
        hydro_vmm_free(address, static_cast<ssize_t>(bytes), on, stream);
      });
  auto pool = std::make_unique<at::cuda::MemPool>(allocator, /*is_user_created=*/true);
  // Every stream, every thread: the filter takes all.
  c10::cuda::CUDACachingAllocator::beginAllocateToPool(device, pool->id(), [](cudaStream_t) { return true; });
  p.allocator = std::move(allocator);
  p.pool = std::move(pool);
  p.device = device;
  return Status::OK();
}

}  // namespace
#endif

bool cuda_cache_release_compiled() { return true; }

// While hydro's pool is routed to, emptyCache() frees neither its free blocks (a pool in use keeps
// them) nor the default pools' (not while any pool is routed to): hydro's move releases the
// pool's idle segments instead (idle_segments, below).
void release_cuda_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

unsigned long long cuda_reserved_bytes(int device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return static_cast<unsigned long long>(stats.reserved_bytes[0].current);  // [0]: all pools
}

Status route_cuda_allocations(MoveCalls* calls, int* device) {
#ifdef HYDRO_CUDA_POOL_ROUTING
  HydroPool& p = hydro_pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.pool) {
    try {
      HYDRO_RETURN_IF_ERROR(route_locked(p));
    } catch (const std::exception& e) {
      return Status::io("routing libtorch's allocations to hydro's: " + first_line(e.what()));
    }
  }
  *calls = VmmAllocator::process()->move_calls();
  calls->idle = [id = p.pool->id()] {
    try {
      return idle_segments(id);
    } catch (const std::exception& e) {
      log("hydro's pool: which segments are idle is unknown (" + first_line(e.what()) + "): all are copied");
      return std::vector<uint64_t>{};
    }
  };
  *device = p.device;
  return Status::OK();
#else
  (void)calls;
  (void)device;
  return Status::not_found("this libtorch (" TORCH_VERSION
                           ") cannot route every thread's allocations to another allocator: torch 2.15 or later");
#endif
}

}  // namespace hydro
