// Issue 57: hydro's device allocator (runtime/cuda/vmm_allocator.h) and its move (hydro/device_move.h)
// over the stand-in driver (fake_libcuda.cpp), whose device memory is host memory mapped at the
// addresses the allocator reserved: what a program wrote there is read back at the same pointers
// after its physical memory was released and mapped anew. The real driver runs on a GPU machine
// only (scripts/gpu-check).
#include "vmm_allocator.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "hydro/gpu_release.h"

namespace hydro {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The stand-in's physical memory held now. It is the library the allocator loads (the same path:
// one copy in the process), kept loaded here, so that a test's first reading comes before any.
unsigned long long physical_bytes() {
  static void* lib = ::dlopen(HYDRO_FAKE_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  auto f = reinterpret_cast<unsigned long long (*)()>(lib ? ::dlsym(lib, "hydro_fake_cuda_physical_bytes") : nullptr);
  return f ? f() : ~0ull;
}

struct FailCall {  // HYDRO_FAKE_CUDA_FAIL for one test's scope
  explicit FailCall(const char* call) { ::setenv("HYDRO_FAKE_CUDA_FAIL", call, 1); }
  ~FailCall() { ::unsetenv("HYDRO_FAKE_CUDA_FAIL"); }
};

class VmmAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("HYDRO_FAKE_CUDA_FAIL");
    ASSERT_TRUE(VmmAllocator::open(HYDRO_FAKE_LIBCUDA, &alloc).ok());
  }
  // `count` segments of `mib` MiB each, filled with their index and address.
  std::vector<char*> fill(int count, uint64_t mib) {
    std::vector<char*> out;
    for (int i = 0; i < count; ++i) {
      void* p = nullptr;
      EXPECT_TRUE(alloc->allocate(mib * kMiB, 0, &p).ok());
      std::memset(p, 'a' + i, mib * kMiB);
      std::memcpy(p, &p, sizeof p);
      out.push_back(static_cast<char*>(p));
    }
    return out;
  }
  static bool intact(const std::vector<char*>& segments, uint64_t mib) {
    for (size_t i = 0; i < segments.size(); ++i) {
      char* p = segments[i];
      if (std::memcmp(p, &p, sizeof p) != 0) return false;
      for (uint64_t b = sizeof p; b < mib * kMiB; ++b)
        if (p[b] != static_cast<char>('a' + i)) return false;
    }
    return true;
  }
  std::unique_ptr<VmmAllocator> alloc;
  std::vector<std::string> logs;
};

TEST_F(VmmAllocatorTest, ASizeIsRoundedUpToTheGranularityAndFreedWhole) {
  const unsigned long long before = physical_bytes();
  void* p = nullptr;
  ASSERT_TRUE(alloc->allocate(1, 0, &p).ok());
  EXPECT_EQ(alloc->mapped_bytes(), 2 * kMiB);
  EXPECT_EQ(physical_bytes() - before, 2 * kMiB);
  static_cast<char*>(p)[2 * kMiB - 1] = 'x';  // the whole granule is there
  ASSERT_TRUE(alloc->deallocate(p, nullptr).ok());
  EXPECT_EQ(alloc->mapped_bytes(), 0u);
  EXPECT_EQ(physical_bytes(), before);
  EXPECT_FALSE(alloc->deallocate(p, nullptr).ok()) << "twice is refused";
}

TEST_F(VmmAllocatorTest, APauseReleasesThePhysicalMemoryAndTheResumeMapsItAtTheSameAddresses) {
  const unsigned long long before = physical_bytes();
  std::vector<char*> segments = fill(3, 4);
  DeviceMove move(alloc->move_calls(), [this](const std::string& l) { logs.push_back(l); });
  for (int cycle = 0; cycle < 3; ++cycle) {
    ASSERT_TRUE(move.release().ok()) << "cycle " << cycle;
    EXPECT_EQ(alloc->mapped_bytes(), 0u);
    EXPECT_EQ(physical_bytes(), before) << "no device memory held while paused";
    ASSERT_TRUE(move.restore().ok());
    EXPECT_EQ(physical_bytes() - before, 12 * kMiB);
    ASSERT_TRUE(intact(segments, 4)) << "cycle " << cycle << ": every byte back at its pointer";
  }
  EXPECT_EQ(move.pool().pins(), 1) << "one pinned pool for every pause";
  for (char* p : segments) ASSERT_TRUE(alloc->deallocate(p, nullptr).ok());
  EXPECT_EQ(physical_bytes(), before);
}

TEST_F(VmmAllocatorTest, AFailedMapIsUndoneAndItsAddressRangeGivenBack) {
  FailCall fail("cuMemMap");
  void* p = nullptr;
  Status s = alloc->allocate(kMiB, 0, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuMemMap"), std::string::npos) << s.message();
  EXPECT_EQ(alloc->mapped_bytes(), 0u);
}

TEST_F(VmmAllocatorTest, AResumeThatCannotMapSaysTheMemoryIsLost) {
  std::vector<char*> segments = fill(2, 2);
  DeviceMove move(alloc->move_calls(), [this](const std::string& l) { logs.push_back(l); });
  ASSERT_TRUE(move.release().ok());
  {
    FailCall fail("cuMemCreate");
    Status s = move.restore();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("cuMemCreate"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("lost"), std::string::npos) << s.message();
  }
}

TEST_F(VmmAllocatorTest, AReleaseThatCannotUnmapLeavesTheMemoryAsItWas) {
  std::vector<char*> segments = fill(2, 2);
  DeviceMove move(alloc->move_calls(), [this](const std::string& l) { logs.push_back(l); });
  {
    FailCall fail("cuMemUnmap");
    ASSERT_FALSE(move.release().ok());
  }
  EXPECT_EQ(alloc->mapped_bytes(), 4 * kMiB);
  EXPECT_TRUE(intact(segments, 2));
  for (char* p : segments) ASSERT_TRUE(alloc->deallocate(p, nullptr).ok());
}

TEST_F(VmmAllocatorTest, AReleaseThatFailsAfterTheUnmapLeaksButTheMoveGoesOn) {
  std::vector<char*> segments = fill(2, 2);
  DeviceMove move(alloc->move_calls(), [this](const std::string& l) { logs.push_back(l); });
  {
    FailCall fail("cuMemRelease");
    ASSERT_TRUE(move.release().ok()) << "the segments are unmapped: released, their memory leaked";
  }
  EXPECT_EQ(alloc->mapped_bytes(), 0u);
  ASSERT_TRUE(move.restore().ok());
  EXPECT_TRUE(intact(segments, 2));
}

TEST_F(VmmAllocatorTest, ASegmentFreedWhileReleasedIsAnErrorNotACrash) {
  std::vector<char*> segments = fill(2, 2);
  DeviceMove move(alloc->move_calls(), [this](const std::string& l) { logs.push_back(l); });
  ASSERT_TRUE(move.release().ok());
  ASSERT_TRUE(alloc->deallocate(segments[1], nullptr).ok());
  Status s = move.restore();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no segment of hydro's allocator"), std::string::npos) << s.message();
}

TEST(VmmEntryPoints, TorchsPluggableAllocatorCallsAllocateAndFree) {
  ::setenv("HYDRO_LIBCUDA", HYDRO_FAKE_LIBCUDA, 1);
  const unsigned long long before = physical_bytes();
  void* p = hydro_vmm_malloc(3 * kMiB, 0, nullptr);
  ASSERT_NE(p, nullptr);
  std::memset(p, 7, 3 * kMiB);
  EXPECT_EQ(physical_bytes() - before, 4 * kMiB);
  hydro_vmm_free(p, 3 * kMiB, 0, nullptr);
  EXPECT_EQ(physical_bytes(), before);
  EXPECT_EQ(hydro_vmm_malloc(-1, 0, nullptr), nullptr);
}

// What the Runtime does with HYDRO_GPU_ALLOCATOR=hydro (process_gpu.cpp), without libtorch: the
// process's allocator behind gpu_release=full with no driver checkpoint, its pinned pool grown at
// a step's end, then a pause (Slurm's, 2 s before the freeze) that pins nothing more and frees
// every byte of physical memory, the idle segment's with no copy, and a resume that brings the
// tensors' bytes back at their pointers.
TEST(VmmUnderTheRelease, APauseAfterAStepEndPinsNothingAndFreesEveryByte) {
  ::setenv("HYDRO_LIBCUDA", HYDRO_FAKE_LIBCUDA, 1);
  VmmAllocator* a = VmmAllocator::process();
  ASSERT_NE(a, nullptr);
  const unsigned long long before = physical_bytes();
  char* tensor = static_cast<char*>(hydro_vmm_malloc(4 * kMiB, 0, nullptr));
  void* cached = hydro_vmm_malloc(2 * kMiB, 0, nullptr);
  ASSERT_TRUE(tensor && cached);
  std::memset(tensor, 'T', 4 * kMiB);
  MoveCalls calls = a->move_calls();
  calls.idle = [cached] { return std::vector<uint64_t>{reinterpret_cast<uint64_t>(cached)}; };
  std::vector<std::string> logs;
  DeviceMove move(calls, [&logs](const std::string& l) { logs.push_back(l); });
  ASSERT_TRUE(move.prepare(move.mapped_bytes()).ok()) << "the step end's";
  DeviceCalls device;
  device.device_bytes = [&] { return move.mapped_bytes(); };
  device.host_available = [] { return host_memory_available(); };
  device.release_cache = device.suspend_collectives = device.resume_collectives = [] { return Status::OK(); };
  device.lock = [](std::chrono::milliseconds) { return Status::not_found("no hydro-cuda-checkpoint"); };
  device.checkpoint = device.restore = device.unlock = [] { return Status::not_found("no hydro-cuda-checkpoint"); };
  device.own_move = &move;
  GpuReleaser release(GpuRelease::full, device, [&logs](const std::string& l) { logs.push_back(l); });
  ASSERT_EQ(release.release(std::chrono::milliseconds(5000), std::chrono::milliseconds(2000)), GpuRelease::full);
  EXPECT_EQ(physical_bytes(), before) << "no device memory held while paused";
  EXPECT_EQ(move.pool().pins(), 1) << "pinned at the step end only";
  EXPECT_EQ(move.moved_bytes(), 4 * kMiB) << "the idle segment is not copied";
  ASSERT_TRUE(release.restore().ok());
  EXPECT_EQ(physical_bytes() - before, 6 * kMiB);
  for (uint64_t b = 0; b < 4 * kMiB; ++b) ASSERT_EQ(tensor[b], 'T') << "byte " << b;
  hydro_vmm_free(tensor, 4 * kMiB, 0, nullptr);
  hydro_vmm_free(cached, 2 * kMiB, 0, nullptr);
  EXPECT_EQ(physical_bytes(), before);
}

}  // namespace
}  // namespace hydro
