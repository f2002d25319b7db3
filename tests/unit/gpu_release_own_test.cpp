// Issue 57: `full` moves hydro's allocator's memory by hydro's own move first (hydro/device_move.h),
// with the driver's process checkpoint as the fallback: the order of the calls, the plan against
// the freeze at the move's own rate, and each failure. The device is fake_gpu.h's; the segments a
// fake of their own.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_gpu.h"
#include "hydro/device_move.h"
#include "hydro/gpu_release.h"

namespace hydro {
namespace {

// `bytes` of hydro's allocator's memory in one segment, its calls recorded in `gpu`'s list; the
// one named `fail` (unmap, map) fails.
struct FakeSegments {
  FakeGpu* gpu;
  uint64_t bytes;
  std::string fail;
  bool mapped = true;
  milliseconds copy_takes{0};  // each copy out moves the fake clock on
  std::vector<char> pool;

  Status call(const std::string& name) {
    gpu->calls.push_back(name);
    return name == fail ? Status::io(name + " refused") : Status::OK();
  }
  MoveCalls move_calls() {
    MoveCalls c;
    c.segments = [this] { return mapped ? std::vector<Segment>{{0x7f0000000000, bytes}} : std::vector<Segment>{}; };
    c.host_available = [] { return HostRoom{64 * kGiB, "MemAvailable in /proc/meminfo"}; };
    c.pin = [this](uint64_t, void** host) {
      pool.resize(1);
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
    c.unmap = [this](const Segment&) {
      HYDRO_RETURN_IF_ERROR(call("unmap"));
      mapped = false;
      return Status::OK();
    };
    c.map = [this](const Segment&) {
      HYDRO_RETURN_IF_ERROR(call("map"));
      mapped = true;
      return Status::OK();
    };
    c.now = [this] { return gpu->clock; };
    return c;
  }
};

struct OwnMove {
  FakeGpu gpu;
  FakeSegments segments{&gpu, 4 * kGiB, "", true, milliseconds(0), {}};
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
  EXPECT_EQ(o.gpu.calls, (Calls{"suspend_collectives", "copy_out", "unmap"}));
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls, (Calls{"suspend_collectives", "copy_out", "unmap", "map", "copy_in", "resume_collectives"}));
  EXPECT_TRUE(o.segments.mapped);
}

TEST(GpuReleaseOwn, WithNothingInHydrosAllocatorTheDriverCheckpoints) {
  OwnMove o;
  o.segments.mapped = false;
  GpuReleaser r = o.releaser();
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::full);
  EXPECT_EQ(o.gpu.calls, (Calls{"suspend_collectives", "lock", "checkpoint"}));
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls.back(), "resume_collectives");
}

TEST(GpuReleaseOwn, AMoveThatFailsIsUndoneAndTheDriverCheckpointsInstead) {
  OwnMove o;
  o.segments.fail = "unmap";
  GpuReleaser r = o.releaser();
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::full);
  EXPECT_EQ(o.gpu.calls, (Calls{"suspend_collectives", "copy_out", "unmap", "resume_collectives", "suspend_collectives",
                                "lock", "checkpoint"}));
  EXPECT_TRUE(o.gpu.logged("the driver's process checkpoint instead"));
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(o.gpu.calls.back(), "resume_collectives");
}

TEST(GpuReleaseOwn, TooSlowForTheFreezeAtItsOwnRateReleasesTheCacheOnly) {
  OwnMove o;
  GpuReleaser r = o.releaser();  // 4 GiB at the assumed 1 GiB/s: 4 s, and the freeze is in 2
  EXPECT_EQ(r.release(milliseconds(5000), milliseconds(2000)), GpuRelease::cache);
  EXPECT_EQ(o.gpu.calls, Calls{"release_cache"}) << "the driver's checkpoint, slower, is not tried";
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
  EXPECT_EQ(o.gpu.calls, (Calls{"suspend_collectives", "copy_out", "unmap"}));
  ASSERT_TRUE(r.restore().ok());
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
