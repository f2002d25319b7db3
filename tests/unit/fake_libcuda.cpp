// A stand-in for libcuda.so.1, for the tests where no GPU and no driver are (CI). The real driver
// runs on a GPU machine only (scripts/gpu-check). It appends "CALL PID [ARG]" to
// $HYDRO_FAKE_CUDA_LOG, and fails with CUDA_ERROR_UNKNOWN (999) the call $HYDRO_FAKE_CUDA_FAIL names.
// - The process-checkpoint calls (hydro-cuda-checkpoint's): the state machine the driver documents
//   (running, locked, checkpointed); a call made in the wrong state fails with
//   CUDA_ERROR_ILLEGAL_STATE (401). Names: init, lock, checkpoint, restore, unlock.
// - The virtual memory calls (runtime/cuda/vmm_allocator.h's), over host memory: an address range is an
//   inaccessible mapping, physical memory a memfd, mapping it maps the memfd there, and the copies
//   are memcpy. hydro_fake_cuda_physical_bytes() says how much physical memory is held. Names:
//   the driver's (cuMemCreate, cuMemMap, ...).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace {

enum State { running = 0, locked = 1, checkpointed = 2 };
State state = running;

int record(const char* call, int pid, long arg = -1) {
  if (const char* path = std::getenv("HYDRO_FAKE_CUDA_LOG")) {
    if (FILE* f = std::fopen(path, "a")) {
      if (arg >= 0)
        std::fprintf(f, "%s %d %ld\n", call, pid, arg);
      else
        std::fprintf(f, "%s %d\n", call, pid);
      std::fclose(f);
    }
  }
  const char* fail = std::getenv("HYDRO_FAKE_CUDA_FAIL");
  return fail && std::strcmp(fail, call) == 0 ? 999 : 0;
}

int step(const char* call, int pid, State from, State to, long arg = -1) {
  if (int r = record(call, pid, arg)) return r;
  if (state != from) return 401;
  state = to;
  return 0;
}

}  // namespace

extern "C" {

int cuInit(unsigned flags) { return record("init", 0, flags); }

int cuGetErrorName(int error, const char** name) {
  *name = error == 999 ? "CUDA_ERROR_UNKNOWN" : error == 401 ? "CUDA_ERROR_ILLEGAL_STATE" : "CUDA_ERROR_OTHER";
  return 0;
}

int cuCheckpointProcessLock(int pid, const unsigned* args) { return step("lock", pid, running, locked, *args); }
int cuCheckpointProcessCheckpoint(int pid, void*) { return step("checkpoint", pid, locked, checkpointed); }
int cuCheckpointProcessRestore(int pid, void*) { return step("restore", pid, checkpointed, locked); }
int cuCheckpointProcessUnlock(int pid, void*) { return step("unlock", pid, locked, running); }

int cuCheckpointProcessGetState(int, int* out) {
  *out = state;
  return 0;
}
}

// The virtual memory calls. Handles are a memfd's descriptor plus one; the driver's types are
// 64-bit integers and pointers here, as in its ABI.
namespace {

std::mutex vmm_mu;
std::map<unsigned long long, size_t> physical;  // handle -> bytes

int fd_of(unsigned long long handle) { return static_cast<int>(handle) - 1; }

}  // namespace

extern "C" {

unsigned long long hydro_fake_cuda_physical_bytes() {
  std::lock_guard<std::mutex> lock(vmm_mu);
  unsigned long long total = 0;
  for (const auto& [handle, bytes] : physical) total += bytes;
  return total;
}

int cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return record("cuDeviceGet", 0, ordinal);
}
int cuDevicePrimaryCtxRetain(void** context, int device) {
  *context = reinterpret_cast<void*>(static_cast<uintptr_t>(device) + 1);
  return record("cuDevicePrimaryCtxRetain", 0, device);
}
int cuCtxPushCurrent_v2(void*) { return record("cuCtxPushCurrent", 0); }
int cuCtxPopCurrent_v2(void** context) {
  *context = nullptr;
  return record("cuCtxPopCurrent", 0);
}
int cuMemGetAllocationGranularity(size_t* granularity, const void*, int) {
  *granularity = 2u << 20;
  return record("cuMemGetAllocationGranularity", 0);
}
int cuMemAddressReserve(unsigned long long* address, size_t bytes, size_t, unsigned long long, unsigned long long) {
  if (int r = record("cuMemAddressReserve", 0, static_cast<long>(bytes))) return r;
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *address = reinterpret_cast<uintptr_t>(p);
  return 0;
}
int cuMemAddressFree(unsigned long long address, size_t bytes) {
  if (int r = record("cuMemAddressFree", 0)) return r;
  return ::munmap(reinterpret_cast<void*>(address), bytes) == 0 ? 0 : 1;
}
int cuMemCreate(unsigned long long* handle, size_t bytes, const void*, unsigned long long) {
  if (int r = record("cuMemCreate", 0, static_cast<long>(bytes))) return r;
  const int fd = ::memfd_create("hydro-fake-cuda", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return 2;
  std::lock_guard<std::mutex> lock(vmm_mu);
  *handle = static_cast<unsigned long long>(fd) + 1;
  physical[*handle] = bytes;
  return 0;
}
int cuMemRelease(unsigned long long handle) {
  if (int r = record("cuMemRelease", 0)) return r;
  std::lock_guard<std::mutex> lock(vmm_mu);
  if (physical.erase(handle) == 0) return 1;  // CUDA_ERROR_INVALID_VALUE
  ::close(fd_of(handle));                     // its pages go once no mapping holds them
  return 0;
}
int cuMemMap(unsigned long long address, size_t bytes, size_t offset, unsigned long long handle, unsigned long long) {
  if (int r = record("cuMemMap", 0)) return r;
  void* p = ::mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd_of(handle),
                   static_cast<off_t>(offset));
  return p == MAP_FAILED ? 1 : 0;
}
int cuMemUnmap(unsigned long long address, size_t bytes) {
  if (int r = record("cuMemUnmap", 0)) return r;
  void* p = ::mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);  // the range stays reserved
  return p == MAP_FAILED ? 1 : 0;
}
int cuMemSetAccess(unsigned long long address, size_t bytes, const void*, size_t) {
  if (int r = record("cuMemSetAccess", 0)) return r;
  return ::mprotect(reinterpret_cast<void*>(address), bytes, PROT_READ | PROT_WRITE) == 0 ? 0 : 1;
}
int cuMemHostAlloc(void** host, size_t bytes, unsigned) {
  if (int r = record("cuMemHostAlloc", 0, static_cast<long>(bytes))) return r;
  *host = std::malloc(bytes);
  return *host ? 0 : 2;
}
int cuMemFreeHost(void* host) {
  std::free(host);
  return 0;
}
int cuStreamCreate(void** stream, unsigned) {
  *stream = reinterpret_cast<void*>(1);
  return record("cuStreamCreate", 0);
}
int cuStreamSynchronize(void*) { return record("cuStreamSynchronize", 0); }
int cuMemcpyDtoHAsync_v2(void* host, unsigned long long device, size_t bytes, void*) {
  if (int r = record("cuMemcpyDtoHAsync", 0)) return r;
  std::memcpy(host, reinterpret_cast<const void*>(device), bytes);
  return 0;
}
int cuMemcpyHtoDAsync_v2(unsigned long long device, const void* host, size_t bytes, void*) {
  if (int r = record("cuMemcpyHtoDAsync", 0)) return r;
  std::memcpy(reinterpret_cast<void*>(device), host, bytes);
  return 0;
}
}
