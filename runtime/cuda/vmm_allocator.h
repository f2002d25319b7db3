// Issue 57: hydro's allocator of device memory, whose every segment it maps itself with the CUDA
// driver's virtual memory calls: an address range reserved (cuMemAddressReserve), physical memory
// created (cuMemCreate) and mapped there (cuMemMap, cuMemSetAccess). So a pause can release a
// segment's physical memory and keep its address (cuMemUnmap, cuMemRelease), and a resume map new
// physical memory at the same address (hydro/device_move.h moves the bytes). The driver is loaded
// at run time (libcuda.so.1, or the tests' stand-in), so nothing here needs a GPU to load.
// Built with the CUDA toolkit's headers (a CUDA libtorch's build); not installed yet.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "hydro/device_move.h"
#include "hydro/status.h"

namespace hydro {

struct VmmDriver;  // the driver's entry points

class VmmAllocator {
 public:
  // Loads the driver from `libcuda` ("" for libcuda.so.1) and initializes it.
  static Status open(const std::string& libcuda, std::unique_ptr<VmmAllocator>* out);
  // The process's allocator, which hydro_vmm_malloc and hydro_vmm_free use: the driver loaded at the
  // first call (HYDRO_LIBCUDA: another library, the tests' stand-in); null, logged once, where it
  // cannot load. Never destroyed.
  static VmmAllocator* process();
  ~VmmAllocator();
  VmmAllocator(const VmmAllocator&) = delete;
  VmmAllocator& operator=(const VmmAllocator&) = delete;

  // `bytes` (rounded up to the device's granularity) of device memory on `device`, mapped at an
  // address of its own.
  Status allocate(uint64_t bytes, int device, void** out);
  // Gives back what allocate() returned, once the work queued on `stream` (a CUstream; null: the
  // default stream), which may still use it, has ended: its physical memory and its address range.
  Status deallocate(void* address, void* stream);
  // The calls through which a DeviceMove moves this allocator's segments (their physical memory
  // released and mapped again at the same address, the copies on a stream of its own).
  MoveCalls move_calls();
  uint64_t mapped_bytes() const;

 private:
  struct Mapping {
    uint64_t bytes = 0;
    int device = 0;
    uint64_t handle = 0;  // the physical memory mapped at the address, while `mapped`
    bool mapped = false;
  };
  explicit VmmAllocator(std::unique_ptr<VmmDriver> driver);
  // Runs `body` with `device`'s primary context current on this thread, then the caller's again.
  Status on_device(int device, const std::function<Status()>& body);
  Status find(uint64_t address, Mapping** out);
  Status map_at(uint64_t address, Mapping* m);
  Status unmap_at(uint64_t address, Mapping* m);
  Status copy(const Segment& seg, void* host, bool out);
  Status remap(const Segment& seg, bool release);
  Status wait_copies();
  Status check(int result, const char* call) const;

  std::unique_ptr<VmmDriver> d_;
  mutable std::mutex mu_;
  std::mutex contexts_mu_;                // the driver's retained contexts (VmmDriver::contexts)
  std::map<uint64_t, Mapping> mappings_;  // by address
};

}  // namespace hydro

// The entry points torch's CUDAPluggableAllocator calls (torch.cuda.memory), over one allocator
// for the process that loads the driver at its first call; null or nothing on an error, which is
// logged.
extern "C" void* hydro_vmm_malloc(ssize_t size, int device, void* stream);
extern "C" void hydro_vmm_free(void* address, ssize_t size, int device, void* stream);
