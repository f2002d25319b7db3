// Issue 33: the order of a GPU release's calls and every fallback (hydro/gpu_release.h), through a
// fake of the driver's calls that records them and fails the one it is told to. The driver's own
// calls run on a GPU machine only (scripts/gpu-check).
#include "hydro/gpu_release.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_gpu.h"

namespace hydro {
namespace {

TEST(GpuRelease, NamesRoundTripAndABadOneIsRefused) {
  for (GpuRelease g : {GpuRelease::off, GpuRelease::cache, GpuRelease::full}) {
    GpuRelease back = GpuRelease::off;
    ASSERT_TRUE(gpu_release_from_name(gpu_release_name(g), &back));
    EXPECT_EQ(back, g);
  }
  GpuRelease out = GpuRelease::cache;
  EXPECT_FALSE(gpu_release_from_name("on", &out));
  EXPECT_FALSE(gpu_release_from_name("FULL", &out));
  EXPECT_EQ(out, GpuRelease::cache);
}

TEST(GpuRelease, OffCallsNothingAndCacheOnlyFreesTheCache) {
  FakeGpu off, cache;
  auto r_off = off.releaser(GpuRelease::off);
  EXPECT_EQ(r_off.release(milliseconds(100)), GpuRelease::off);
  EXPECT_TRUE(r_off.restore().ok());
  EXPECT_EQ(off.calls, Calls{});
  auto r_cache = cache.releaser(GpuRelease::cache);
  EXPECT_EQ(r_cache.release(milliseconds(100)), GpuRelease::cache);
  EXPECT_TRUE(r_cache.restore().ok());
  EXPECT_EQ(cache.calls, Calls{"release_cache"});
}

TEST(GpuRelease, FullSuspendsNcclLocksAndCheckpointsThenRestoresInTheReverseOrder) {
  FakeGpu d;
  auto r = d.releaser(GpuRelease::full);
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::full);
  EXPECT_EQ(d.calls, (Calls{"suspend_collectives", "lock", "checkpoint"}));
  EXPECT_TRUE(r.restore().ok());
  EXPECT_EQ(d.calls, (Calls{"suspend_collectives", "lock", "checkpoint", "restore", "unlock", "resume_collectives"}));
  EXPECT_EQ(r.held(), GpuRelease::off);
  EXPECT_TRUE(d.logged("4096 MiB of device state moved to host memory"));
}

TEST(GpuRelease, FullThatDoesNotFitInHostMemoryFreesTheCacheAndSaysWhy) {
  FakeGpu d;
  d.device = 40 * kGiB;
  d.host = 44 * kGiB;  // 4 GiB left, an eighth of 40 is 5: it does not fit
  auto r = d.releaser(GpuRelease::full);
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::cache);
  EXPECT_EQ(d.calls, Calls{"release_cache"});
  EXPECT_TRUE(
      d.logged("the device state (40960 MiB) does not fit in host memory (45056 MiB available, bound by "
               "MemAvailable in /proc/meminfo; 5120 MiB kept free)"))
      << d.logs.front();
  EXPECT_TRUE(r.restore().ok());
}

TEST(GpuRelease, HostRoomIsTheLargerOfOneGiBAndAnEighth) {
  EXPECT_TRUE(fits_in_host(1 * kGiB, 2 * kGiB));
  EXPECT_FALSE(fits_in_host(1 * kGiB, 2 * kGiB - 1));
  EXPECT_TRUE(fits_in_host(16 * kGiB, 18 * kGiB));
  EXPECT_FALSE(fits_in_host(16 * kGiB, 18 * kGiB - 1));
  EXPECT_FALSE(fits_in_host(8 * kGiB, 4 * kGiB));
}

// A failure at each step of `full` undoes the steps before it, in reverse, and ends as `cache`:
// paused, with the cache released, and nothing to bring back.
struct FailingStep {
  const char* step;
  Calls calls;
  const char* why;
};

class GpuReleaseFailure : public ::testing::TestWithParam<FailingStep> {};

TEST_P(GpuReleaseFailure, UndoesTheStepsBeforeAndFallsBackToTheCache) {
  FakeGpu d;
  d.fail = GetParam().step;
  auto r = d.releaser(GpuRelease::full);
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::cache);
  EXPECT_EQ(d.calls, GetParam().calls);
  EXPECT_TRUE(
      d.logged(std::string("gpu_release=full failed ") + GetParam().why + " (" + GetParam().step + " refused)"));
  EXPECT_TRUE(r.restore().ok());
  EXPECT_EQ(d.calls, GetParam().calls) << "nothing was moved, so nothing is brought back";
}

INSTANTIATE_TEST_SUITE_P(EachStep, GpuReleaseFailure,
                         ::testing::Values(FailingStep{"suspend_collectives",
                                                       {"suspend_collectives", "release_cache"},
                                                       "suspending the NCCL communicators"},
                                           FailingStep{
                                               "lock",
                                               {"suspend_collectives", "lock", "resume_collectives", "release_cache"},
                                               "locking the process's CUDA calls"},
                                           FailingStep{"checkpoint",
                                                       {"suspend_collectives", "lock", "checkpoint", "unlock",
                                                        "resume_collectives", "release_cache"},
                                                       "moving the device state to host memory"}),
                         [](const auto& info) { return std::string(info.param.step); });

TEST(GpuRelease, ACacheReleaseThatFailsSaysOffAndTheJobStaysPaused) {
  FakeGpu d;
  d.fail = "release_cache";
  auto r = d.releaser(GpuRelease::cache);
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::off);
  EXPECT_TRUE(d.logged("freeing the allocator's cached memory failed (release_cache refused)"));
  EXPECT_TRUE(r.restore().ok());
}

TEST(GpuRelease, AnUndoThatFailsMakesTheRestoreAnError) {
  FakeGpu d;
  d.fail = "checkpoint";
  d.also_fail = {"unlock"};
  auto r = d.releaser(GpuRelease::full);
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::cache);
  Status s = r.restore();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unlocking the process's CUDA calls after a failed release failed (unlock refused)"),
            std::string::npos)
      << s.message();
}

TEST(GpuRelease, ARestoreThatFailsIsAnErrorNamingIt) {
  for (const char* step : {"restore", "unlock", "resume_collectives"}) {
    FakeGpu d;
    auto r = d.releaser(GpuRelease::full);
    ASSERT_EQ(r.release(milliseconds(100)), GpuRelease::full);
    d.fail = step;
    Status s = r.restore();
    EXPECT_FALSE(s.ok()) << step;
    EXPECT_NE(s.message().find(std::string(step) + " refused"), std::string::npos) << s.message();
    EXPECT_FALSE(r.restore().ok()) << "a lost device state stays lost";
  }
}

// Slurm's suspend freezes the process 2 s after SIGTSTP, and a frozen process cannot be
// checkpointed: `full` goes ahead only when the move fits in 3/4 of the time left, at the assumed
// rate until one is measured, and its lock waits at most a quarter of it.
TEST(GpuRelease, BeforeAFreezeFullGoesAheadOnlyWhenTheMoveFits) {
  FakeGpu small, big;
  small.device = kGiB;  // 1 s at the assumed 1 GiB/s: fits in 1.5 s
  auto r = small.releaser(GpuRelease::full);
  EXPECT_EQ(r.release(milliseconds(5000), milliseconds(2000)), GpuRelease::full);
  EXPECT_EQ(small.lock_timeout, milliseconds(500));
  EXPECT_TRUE(r.restore().ok());

  big.device = 2 * kGiB;  // 2 s: does not
  auto rb = big.releaser(GpuRelease::full);
  EXPECT_EQ(rb.release(milliseconds(5000), milliseconds(2000)), GpuRelease::cache);
  EXPECT_EQ(big.calls, Calls{"release_cache"});
  EXPECT_TRUE(big.logged("moving 2048 MiB at 1024 MiB/s takes about 2.00 s, and the process is frozen in 2.00 s"))
      << big.logs.front();
}

TEST(GpuRelease, TheRateMeasuredByOneReleaseDecidesTheNext) {
  FakeGpu d;
  d.device = 4 * kGiB;
  d.checkpoint_takes = milliseconds(400);  // 10 GiB/s
  auto r = d.releaser(GpuRelease::full);
  EXPECT_EQ(r.release(milliseconds(100)), GpuRelease::full);  // no freeze follows (hydroctl pause)
  EXPECT_EQ(r.rate(), 10 * kGiB);
  EXPECT_TRUE(d.logged("4096 MiB of device state moved to host memory in 0.40 s"));
  ASSERT_TRUE(r.restore().ok());
  EXPECT_EQ(r.release(milliseconds(100), milliseconds(2000)), GpuRelease::full);  // 0.4 s of 1.5
}

TEST(GpuRelease, AReleaseAfterARestoreStartsAgain) {
  FakeGpu d;
  auto r = d.releaser(GpuRelease::full);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(r.release(milliseconds(100)), GpuRelease::full);
    ASSERT_TRUE(r.restore().ok());
  }
  EXPECT_EQ(d.calls.size(), 18u);
}

}  // namespace
}  // namespace hydro
