// Issue 57: `full` moves hydro's allocator's memory by hydro's own move first (hydro/device_move.h),
// with the driver's process checkpoint as the fallback: the order of the calls, the plan against
// the freeze at the move's own rate, and each failure. The device is fake_gpu.h's; the segments a
// fake of their own.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "fake_gpu.h"
#include "hydro/device_move.h"
#include "hydro/gpu_release.h"

namespace hydro {
namespace {

// `count` segments of `bytes` each of hydro's allocator's memory, their calls recorded in `gpu`'s
// list; a call named `fail` or `also_fail` fails, and the `unmap_fails_at`-th unmap (0: none).
struct FakeSegments {
  FakeGpu* gpu = nullptr;
  uint64_t bytes = 4 * kGiB;
  int count = 1;
  std::string fail, also_fail;
  int unmap_fails_at = 0;
  milliseconds copy_takes{0};  // each copy out moves the fake clock on
  std::set<uint64_t> released;
  std::vector<char> pool = std::vector<char>(1);
  int unmaps = 0;

  Status call(const std::string& name) {
    gpu->calls.push_back(name);
    const bool fails = name == fail || name == also_fail || (name == "unmap" && ++unmaps == unmap_fails_at);
    return fails ? Status::io(name + " refused") : Status::OK();
  }
  MoveCalls move_calls() {
    MoveCalls c;
    c.segments = [this] {
      std::vector<Segment> out;
      for (int i = 0; i < count; ++i) {
        const uint64_t address = 0x7f0000000000 + i * bytes;
        if (!released.count(address)) out.push_back({address, bytes});
      }
      return out;
    };
    c.host_available = [] { return HostRoom{64 * kGiB, "MemAvailable in /proc/meminfo"}; };
    c.pin = [this](uint64_t, void** host) {
      *host = pool.data();
      return Status::OK();
    };
    c.unpin = [](void*, uint64_t) {};
    c.copy_out = [this](const Segment&, void*) {
      gpu->clock += copy_takes;
      return call("copy_out");
    };
    c.copy_in = [this](const Segment&, const void*) { return call("copy_in"); };
    c.wait_copies = [] { return Status::OK(); };
    c.unmap = [this](const Segment& s) {
      HYDRO_RETURN_IF_ERROR(call("unmap"));
      released.insert(s.address);
      return Status::OK();
    };
    c.map = [this](const Segment& s) {
      HYDRO_RETURN_IF_ERROR(call("map"));
      released.erase(s.address);
      return Status::OK();
    };
    c.now = [this] { return gpu->clock; };
    c.idle = [this] { return idle; };
    return c;
  }
  std::vector<uint64_t> idle;  // segments holding no tensor, by address
};

FakeSegments on(FakeGpu* gpu) {
  FakeSegments s;
  s.gpu = gpu;
  return s;
}

struct OwnMove {
  FakeGpu gpu;
  FakeSegments segments = on(&gpu);
  DeviceMove move{segments.move_calls(), [this](const std::string& l) { gpu.logs.push_back(l); }};

  GpuReleaser releaser() {
    DeviceCalls c = gpu.device_calls();
    c.own_move = &move;
    return GpuReleaser(GpuRelease::full, c, [this](const std::string& l) { gpu.logs.push_back(l); });
  }
};

TEST(GpuReleaseOwn, HydrosMoveComesFirstAndNeedsNoLock) {
  OwnMove o;
  GpuReleaser r = o.releaser();
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::full);
  EXPECT_EQ(o.gpu.calls, (Calls{"release_cache", "suspend_collectives", "copy_out", "unmap"}))
      << "the allocator's free blocks are freed, not moved";
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls, (Calls{"release_cache", "suspend_collectives", "copy_out", "unmap", "map", "copy_in",
                                "resume_collectives"}));
  EXPECT_TRUE(o.segments.released.empty());
}

TEST(GpuReleaseOwn, WithNothingInHydrosAllocatorTheDriverCheckpoints) {
  OwnMove o;
  o.segments.count = 0;
  GpuReleaser r = o.releaser();
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::full);
  EXPECT_EQ(o.gpu.calls, (Calls{"suspend_collectives", "lock", "checkpoint"}));
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls.back(), "resume_collectives");
}

TEST(GpuReleaseOwn, AMoveThatFailsIsUndoneAndTheDriverCheckpointsInstead) {
  OwnMove o;
  o.segments.unmap_fails_at = 1;
  GpuReleaser r = o.releaser();
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::full);
  EXPECT_EQ(o.gpu.calls, (Calls{"release_cache", "suspend_collectives", "copy_out", "unmap", "resume_collectives",
                                "suspend_collectives", "lock", "checkpoint"}));
  EXPECT_TRUE(o.gpu.logged("the driver's process checkpoint instead"));
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls.back(), "resume_collectives");
}

TEST(GpuReleaseOwn, TooSlowForTheFreezeAtItsOwnRateReleasesTheCacheOnly) {
  OwnMove o;
  GpuReleaser r = o.releaser();  // 4 GiB at the assumed 1 GiB/s: 4 s, and the freeze is in 2
  EXPECT_EQ(r.release(milliseconds(5000), milliseconds(2000)), GpuRelease::cache);
  EXPECT_EQ(o.gpu.calls, Calls{"release_cache"}) << "the driver's checkpoint, slower, is not tried; the cache once";
  ASSERT_TRUE(r.restore().ok());
}

TEST(GpuReleaseOwn, ItsMeasuredRateDecidesTheNextFreeze) {
  OwnMove o;
  o.segments.copy_takes = milliseconds(200);  // 4 GiB in 0.2 s: 20 GiB/s
  GpuReleaser r = o.releaser();
  ASSERT_EQ(r.release(milliseconds(100)), GpuRelease::full);  // hydroctl pause: no freeze follows
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(r.own_rate(), 20 * kGiB);
  EXPECT_EQ(r.rate(), GpuReleaser::kAssumedRate) << "the driver's rate is its own";
  o.gpu.calls.clear();
  EXPECT_EQ(r.release(milliseconds(5000), milliseconds(2000)), GpuRelease::full) << "0.2 s of the 1.5 s";
  EXPECT_EQ(o.gpu.calls, (Calls{"release_cache", "suspend_collectives", "copy_out", "unmap"}));
  ASSERT_TRUE(r.restore().ok());
}

TEST(GpuReleaseOwn, IdleSegmentsAreReleasedWithNoCopyAndDoNotCountAgainstTheFreeze) {
  OwnMove o;
  o.segments.count = 4;
  o.segments.bytes = kGiB;
  o.segments.idle = {0x7f0000000000 + kGiB, 0x7f0000000000 + 2 * kGiB, 0x7f0000000000 + 3 * kGiB};
  GpuReleaser r = o.releaser();  // 1 GiB to copy at the assumed 1 GiB/s: 1 s of the 1.5 s; 4 GiB would not fit
  EXPECT_EQ(r.release(milliseconds(5000), milliseconds(2000)), GpuRelease::full);
  EXPECT_EQ(o.gpu.calls,
            (Calls{"release_cache", "suspend_collectives", "copy_out", "unmap", "unmap", "unmap", "unmap"}))
      << "only the segment that holds tensors is copied; every segment's memory is released";
  EXPECT_EQ(o.segments.released.size(), 4u);
  o.gpu.calls.clear();
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls, (Calls{"map", "copy_in", "map", "map", "map", "resume_collectives"}));
  EXPECT_TRUE(o.gpu.logged("3072 MiB of them idle")) << o.gpu.logs.back();
}

TEST(GpuReleaseOwn, WithNoDriverCheckpointAFailedMoveReleasesTheCacheAndTheIdleSegments) {
  OwnMove o;
  o.segments.count = 2;
  o.segments.bytes = kGiB;
  o.segments.idle = {0x7f0000000000 + kGiB};
  o.segments.unmap_fails_at = 1;  // the move fails on its first unmap and is undone
  DeviceCalls c = o.gpu.device_calls();
  c.lock = nullptr;  // no hydro-cuda-checkpoint
  c.checkpoint = c.restore = c.unlock = nullptr;
  c.own_move = &o.move;
  GpuReleaser r(GpuRelease::full, c, [&o](const std::string& l) { o.gpu.logs.push_back(l); });
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::cache);
  EXPECT_EQ(o.gpu.calls,
            (Calls{"release_cache", "suspend_collectives", "copy_out", "unmap", "resume_collectives", "unmap"}))
      << "no lock: the idle segment's memory is released instead";
  EXPECT_TRUE(o.gpu.logged("releasing the cache only"));
  EXPECT_EQ(o.segments.released.size(), 1u);
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls.back(), "map");
  EXPECT_TRUE(o.segments.released.empty());
}

TEST(GpuReleaseOwn, AMoveWhoseUndoFailsIsNotFollowedByTheDriversCheckpoint) {
  OwnMove o;
  o.segments.count = 2;
  o.segments.bytes = kGiB;
  o.segments.unmap_fails_at = 2;  // the first segment released, the second not
  o.segments.fail = "map";        // and the undo cannot map the first back: lost
  GpuReleaser r = o.releaser();
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::cache);
  EXPECT_EQ(o.gpu.calls, (Calls{"release_cache", "suspend_collectives", "copy_out", "copy_out", "unmap", "unmap", "map",
                                "resume_collectives"}))
      << "no lock or checkpoint of a process whose memory is lost";
  Status s = r.restore();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lost"), std::string::npos) << s.message();
}

TEST(GpuReleaseOwn, ARestoreThatFailsIsAnErrorAndNcclStaysSuspended) {
  OwnMove o;
  GpuReleaser r = o.releaser();
  ASSERT_EQ(r.release(milliseconds(100)), GpuRelease::full);
  o.segments.fail = "map";
  Status s = r.restore();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the device memory is lost"), std::string::npos) << s.message();
  EXPECT_NE(o.gpu.calls.back(), "resume_collectives");
  EXPECT_FALSE(r.restore().ok()) << "still lost";
}

}  // namespace
}  // namespace hydro
