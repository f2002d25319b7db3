// Issue 57 on a real device: hydro's device allocator (runtime/cuda/vmm_allocator.h) and its move
// (hydro/device_move.h) through libcuda.so.1. Checks, and prints figures for the note:
//  1. while released, the device's used memory falls by every byte the allocator had mapped;
//  2. after the restore, every segment holds its bytes again at the same address;
//  3. the release and restore rates beside a plain pinned cudaMemcpyAsync of the same bytes on the
//     same device, in the same run (the goal: at least 0.8 of it each way).
//   hydro-vmm-move-check [GIB [SEGMENT_MIB]]   GIB of device memory (default 8) in segments of
//                                              SEGMENT_MIB (default 20, the caching allocator's
//                                              large segment)
// `--linked` only says it was built and loads (CI, which has no GPU).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "vmm_allocator.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;
int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

uint64_t device_used() {
  size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return total - free;
}

// A plain pinned copy of `bytes` each way, on one stream: the link's rate as the runtime gets it.
void plain_copy(uint64_t bytes, double* out_s, double* in_s) {
  void *device = nullptr, *host = nullptr;
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (cudaMalloc(&device, bytes) != cudaSuccess || cudaHostAlloc(&host, bytes, cudaHostAllocPortable) != cudaSuccess) {
    check(false, "the plain copy's buffers");
    return;
  }
  auto start = Clock::now();
  cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  *out_s = since(start);
  start = Clock::now();
  cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream);
  cudaStreamSynchronize(stream);
  *in_s = since(start);
  cudaFree(device);
  cudaFreeHost(host);
  cudaStreamDestroy(stream);
}

bool segment_holds(void* p, uint64_t bytes, int value, std::vector<char>* scratch) {
  scratch->resize(bytes);
  if (cudaMemcpy(scratch->data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (char c : *scratch)
    if (c != static_cast<char>(value)) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--linked") == 0) {
    std::printf("hydro-vmm-move-check: built, loads\n");
    return 0;
  }
  const uint64_t gib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8;
  const uint64_t seg_bytes = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20) * kMiB;
  cudaSetDevice(0);
  cudaFree(nullptr);  // the context, before the baseline of used memory
  std::unique_ptr<hydro::VmmAllocator> alloc;
  hydro::Status s = hydro::VmmAllocator::open("", &alloc);
  if (!s.ok()) {
    std::printf("FAIL: %s\n", s.message().c_str());
    return 1;
  }
  std::vector<void*> segments;
  for (uint64_t done = 0; done < gib << 30; done += seg_bytes) {
    void* p = nullptr;
    if (!alloc->allocate(seg_bytes, 0, &p).ok()) break;
    cudaMemset(p, static_cast<int>(segments.size() & 0xff), seg_bytes);
    segments.push_back(p);
  }
  cudaDeviceSynchronize();
  const uint64_t bytes = alloc->mapped_bytes();
  check(bytes >= gib << 30,
        std::to_string(bytes / kMiB) + " MiB mapped in " + std::to_string(segments.size()) + " segments");
  hydro::DeviceMove move(alloc->move_calls(), [](const std::string& line) { std::printf("%s\n", line.c_str()); });
  check(move.prepare(bytes).ok(), "the pinned pool, before the pause");
  const uint64_t used_before = device_used();
  auto start = Clock::now();
  s = move.release();
  const double release_s = since(start);
  check(s.ok(), "release: " + (s.ok() ? std::string("ok") : s.message()));
  const uint64_t freed = used_before - device_used();
  check(freed + 64 * kMiB >= bytes, std::to_string(freed / kMiB) + " MiB of the device freed while released");
  start = Clock::now();
  s = move.restore();
  const double restore_s = since(start);
  check(s.ok(), "restore: " + (s.ok() ? std::string("ok") : s.message()));
  std::vector<char> scratch;
  bool intact = true;
  for (size_t i = 0; i < segments.size() && intact; ++i)
    intact = segment_holds(segments[i], seg_bytes, static_cast<int>(i & 0xff), &scratch);
  check(intact, "every segment's bytes back at its address");
  double plain_out = 0, plain_in = 0;
  plain_copy(bytes, &plain_out, &plain_in);
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf(
      "FIGURE vmm_move bytes=%llu segments=%zu release_GBps=%.1f restore_GBps=%.1f plain_out_GBps=%.1f "
      "plain_in_GBps=%.1f release_ratio=%.2f restore_ratio=%.2f context_MiB=%llu\n",
      static_cast<unsigned long long>(bytes), segments.size(), gb / release_s, gb / restore_s, gb / plain_out,
      gb / plain_in, plain_out / release_s, plain_in / restore_s,
      static_cast<unsigned long long>((used_before - bytes) / kMiB));
  for (void* p : segments) alloc->deallocate(p, nullptr);
  return failures == 0 ? 0 : 1;
}
