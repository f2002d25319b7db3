#include "vmm_allocator.h"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "hydro/log.h"

namespace hydro {

// The driver's entry points, by their ABI names (cuda.h maps some to a _v2).
struct VmmDriver {
  void* lib = nullptr;
  decltype(&cuInit) init = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primary_ctx = nullptr;
  decltype(&cuCtxPushCurrent_v2) push_ctx = nullptr;
  decltype(&cuCtxPopCurrent_v2) pop_ctx = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemHostAlloc) host_alloc = nullptr;
  decltype(&cuMemFreeHost) free_host = nullptr;
  decltype(&cuStreamCreate) stream_create = nullptr;
  decltype(&cuStreamSynchronize) stream_sync = nullptr;
  decltype(&cuMemcpyDtoHAsync_v2) to_host = nullptr;
  decltype(&cuMemcpyHtoDAsync_v2) to_device = nullptr;
  std::map<int, CUcontext> contexts;  // each device's primary context, retained
  std::map<int, CUstream> streams;    // each device's stream for a move's copies

  ~VmmDriver() {
    if (lib) ::dlclose(lib);
  }
};

namespace {

template <typename F>
void bind(void* lib, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(::dlsym(lib, name));
  if (!*out) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

std::string load(const std::string& path, VmmDriver* d) {
  d->lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) return "cannot load the CUDA driver " + path + ": " + ::dlerror();
  std::string missing;
  bind(d->lib, "cuInit", &d->init, &missing);
  bind(d->lib, "cuGetErrorName", &d->error_name, &missing);
  bind(d->lib, "cuDeviceGet", &d->device_get, &missing);
  bind(d->lib, "cuDevicePrimaryCtxRetain", &d->primary_ctx, &missing);
  bind(d->lib, "cuCtxPushCurrent_v2", &d->push_ctx, &missing);
  bind(d->lib, "cuCtxPopCurrent_v2", &d->pop_ctx, &missing);
  bind(d->lib, "cuMemGetAllocationGranularity", &d->granularity, &missing);
  bind(d->lib, "cuMemAddressReserve", &d->reserve, &missing);
  bind(d->lib, "cuMemAddressFree", &d->address_free, &missing);
  bind(d->lib, "cuMemCreate", &d->create, &missing);
  bind(d->lib, "cuMemRelease", &d->release, &missing);
  bind(d->lib, "cuMemMap", &d->map, &missing);
  bind(d->lib, "cuMemUnmap", &d->unmap, &missing);
  bind(d->lib, "cuMemSetAccess", &d->set_access, &missing);
  bind(d->lib, "cuMemHostAlloc", &d->host_alloc, &missing);
  bind(d->lib, "cuMemFreeHost", &d->free_host, &missing);
  bind(d->lib, "cuStreamCreate", &d->stream_create, &missing);
  bind(d->lib, "cuStreamSynchronize", &d->stream_sync, &missing);
  bind(d->lib, "cuMemcpyDtoHAsync_v2", &d->to_host, &missing);
  bind(d->lib, "cuMemcpyHtoDAsync_v2", &d->to_device, &missing);
  return missing.empty() ? "" : path + " has no " + missing;
}

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

Status VmmAllocator::open(const std::string& libcuda, std::unique_ptr<VmmAllocator>* out) {
  auto d = std::make_unique<VmmDriver>();
  const std::string path = libcuda.empty() ? "libcuda.so.1" : libcuda;
  std::string error = load(path, d.get());
  if (!error.empty()) return Status::not_found(error);
  std::unique_ptr<VmmAllocator> a(new VmmAllocator(std::move(d)));
  HYDRO_RETURN_IF_ERROR(a->check(a->d_->init(0), "cuInit"));
  *out = std::move(a);
  return Status::OK();
}

VmmAllocator::VmmAllocator(std::unique_ptr<VmmDriver> driver) : d_(std::move(driver)) {}

VmmAllocator::~VmmAllocator() = default;  // the process's device memory is the driver's to end

Status VmmAllocator::check(int result, const char* call) const {
  if (result == CUDA_SUCCESS) return Status::OK();
  const char* name = nullptr;
  if (d_->error_name(static_cast<CUresult>(result), &name) != CUDA_SUCCESS || !name) name = "unknown error";
  return Status::io(std::string(call) + ": " + name + " (" + std::to_string(result) + ")");
}

Status VmmAllocator::on_device(int device, const std::function<Status()>& body) {
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(contexts_mu_);  // the pin calls it without mu_
    auto it = d_->contexts.find(device);
    if (it == d_->contexts.end()) {
      CUdevice dev = 0;
      HYDRO_RETURN_IF_ERROR(check(d_->device_get(&dev, device), "cuDeviceGet"));
      HYDRO_RETURN_IF_ERROR(check(d_->primary_ctx(&ctx, dev), "cuDevicePrimaryCtxRetain"));
      it = d_->contexts.emplace(device, ctx).first;
    }
    ctx = it->second;
  }
  HYDRO_RETURN_IF_ERROR(check(d_->push_ctx(ctx), "cuCtxPushCurrent"));
  Status s = body();
  CUcontext popped = nullptr;
  Status popped_ok = check(d_->pop_ctx(&popped), "cuCtxPopCurrent");
  return s.ok() ? popped_ok : s;
}

Status VmmAllocator::find(uint64_t address, Mapping** out) {
  auto it = mappings_.find(address);
  if (it == mappings_.end()) return Status::not_found("no segment of hydro's allocator at " + std::to_string(address));
  *out = &it->second;
  return Status::OK();
}

Status VmmAllocator::allocate(uint64_t bytes, int device, void** out) {
  std::lock_guard<std::mutex> lock(mu_);
  return on_device(device, [&] {
    const CUmemAllocationProp prop = device_memory(device);
    size_t granularity = 0;
    HYDRO_RETURN_IF_ERROR(check(d_->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                                "cuMemGetAllocationGranularity"));
    if (granularity == 0) granularity = 2u << 20;
    Mapping seg{(bytes + granularity - 1) / granularity * granularity, device, 0, false};
    CUdeviceptr address = 0;
    HYDRO_RETURN_IF_ERROR(check(d_->reserve(&address, seg.bytes, granularity, 0, 0), "cuMemAddressReserve"));
    Status s = map_at(address, &seg);
    if (!s.ok()) {
      d_->address_free(address, seg.bytes);
      return s;
    }
    mappings_[address] = seg;
    *out = reinterpret_cast<void*>(address);
    return Status::OK();
  });
}

Status VmmAllocator::deallocate(void* address, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto at = reinterpret_cast<uint64_t>(address);
  Mapping* found = nullptr;
  HYDRO_RETURN_IF_ERROR(find(at, &found));
  Mapping m = *found;
  return on_device(m.device, [&] {
    HYDRO_RETURN_IF_ERROR(check(d_->stream_sync(static_cast<CUstream>(stream)), "cuStreamSynchronize"));
    mappings_.erase(at);
    if (m.mapped) HYDRO_RETURN_IF_ERROR(unmap_at(at, &m));
    return check(d_->address_free(at, m.bytes), "cuMemAddressFree");
  });
}

// New physical memory for `seg`, mapped at `address`, readable and writable from its device.
Status VmmAllocator::map_at(uint64_t address, Mapping* seg) {
  const CUmemAllocationProp prop = device_memory(seg->device);
  CUmemGenericAllocationHandle handle = 0;
  HYDRO_RETURN_IF_ERROR(check(d_->create(&handle, seg->bytes, &prop, 0), "cuMemCreate"));
  Status s = check(d_->map(address, seg->bytes, 0, handle, 0), "cuMemMap");
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (s.ok()) s = check(d_->set_access(address, seg->bytes, &access, 1), "cuMemSetAccess");
  if (!s.ok()) {
    d_->unmap(address, seg->bytes);  // a no-op where cuMemMap failed
    d_->release(handle);
    return s;
  }
  seg->handle = handle;
  seg->mapped = true;
  return Status::OK();
}

// The physical memory of `seg` released; its address range stays reserved.
// A release that fails once the unmap is done leaks that physical memory, logged; the segment is
// released all the same (its bytes are the pool's, and a restore maps new memory).
Status VmmAllocator::unmap_at(uint64_t address, Mapping* seg) {
  HYDRO_RETURN_IF_ERROR(check(d_->unmap(address, seg->bytes), "cuMemUnmap"));
  seg->mapped = false;
  Status s = check(d_->release(seg->handle), "cuMemRelease");
  if (!s.ok())
    hydro::log("hydro's device allocator: " + s.message() + ": " + std::to_string(seg->bytes) +
               " bytes of device memory stay taken until the process ends");
  return Status::OK();
}

uint64_t VmmAllocator::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = 0;
  for (const auto& [address, m] : mappings_) total += m.mapped ? m.bytes : 0;
  return total;
}

// One segment's copy queued on its device's stream: to `host` (out), or back from it.
Status VmmAllocator::copy(const Segment& seg, void* host, bool out) {
  std::lock_guard<std::mutex> lock(mu_);
  Mapping* m = nullptr;
  HYDRO_RETURN_IF_ERROR(find(seg.address, &m));
  return on_device(m->device, [&] {
    CUstream& stream = d_->streams[m->device];
    if (!stream) HYDRO_RETURN_IF_ERROR(check(d_->stream_create(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
    if (out) return check(d_->to_host(host, seg.address, seg.bytes, stream), "cuMemcpyDtoHAsync");
    return check(d_->to_device(seg.address, host, seg.bytes, stream), "cuMemcpyHtoDAsync");
  });
}

Status VmmAllocator::wait_copies() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [device, stream] : d_->streams) {
    CUstream st = stream;
    HYDRO_RETURN_IF_ERROR(on_device(device, [&] { return check(d_->stream_sync(st), "cuStreamSynchronize"); }));
  }
  return Status::OK();
}

// Unmaps (`release`) or maps again the segment at `seg`'s address.
Status VmmAllocator::remap(const Segment& seg, bool release) {
  std::lock_guard<std::mutex> lock(mu_);
  Mapping* m = nullptr;
  HYDRO_RETURN_IF_ERROR(find(seg.address, &m));
  return on_device(m->device, [&] { return release ? unmap_at(seg.address, m) : map_at(seg.address, m); });
}

MoveCalls VmmAllocator::move_calls() {
  MoveCalls c;
  c.segments = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Segment> out;
    for (const auto& [address, m] : mappings_)
      if (m.mapped) out.push_back({address, m.bytes});
    return out;
  };
  c.host_available = [] { return host_memory_available(); };
  c.pin = [this](uint64_t bytes, void** host) {
    int device = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);  // not held while pinning: seconds for tens of GB
      if (!mappings_.empty()) device = mappings_.begin()->second.device;
    }
    return on_device(device,
                     [&] { return check(d_->host_alloc(host, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"); });
  };
  c.unpin = [this](void* host, uint64_t) { d_->free_host(host); };
  c.copy_out = [this](const Segment& seg, void* host) { return copy(seg, host, true); };
  c.copy_in = [this](const Segment& seg, const void* host) { return copy(seg, const_cast<void*>(host), false); };
  c.wait_copies = [this] { return wait_copies(); };
  c.unmap = [this](const Segment& seg) { return remap(seg, true); };
  c.map = [this](const Segment& seg) { return remap(seg, false); };
  return c;
}

VmmAllocator* VmmAllocator::process() {
  static std::unique_ptr<VmmAllocator>* allocator = new std::unique_ptr<VmmAllocator>;  // a late free may use it
  static std::once_flag once;
  std::call_once(once, [] {
    const char* libcuda = std::getenv("HYDRO_LIBCUDA");
    Status s = open(libcuda ? libcuda : "", allocator);
    if (!s.ok()) log("hydro's device allocator cannot start: " + s.message());
  });
  return allocator->get();
}

}  // namespace hydro

extern "C" void* hydro_vmm_malloc(ssize_t size, int device, void*) {
  hydro::VmmAllocator* a = hydro::VmmAllocator::process();
  void* out = nullptr;
  if (!a || size <= 0) return nullptr;  // torch asks no memory for an empty tensor
  hydro::Status s = a->allocate(static_cast<uint64_t>(size), device, &out);
  if (!s.ok())
    hydro::log("hydro's device allocator: " + std::to_string(size) + " bytes on device " + std::to_string(device) +
               ": " + s.message());
  return s.ok() ? out : nullptr;
}

// The memory may still be in use by work queued on `stream`: that work ends before it is unmapped.
extern "C" void hydro_vmm_free(void* address, ssize_t, int, void* stream) {
  hydro::VmmAllocator* a = hydro::VmmAllocator::process();
  if (!a || !address) return;
  hydro::Status s = a->deallocate(address, stream);
  if (!s.ok())
    hydro::log("hydro's device allocator: freeing " + std::to_string(reinterpret_cast<uintptr_t>(address)) + ": " +
               s.message());
}
