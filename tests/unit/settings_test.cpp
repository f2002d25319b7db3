#include <gtest/gtest.h>

#include <map>

#include "hydro/settings.h"

namespace hydro {
namespace {

Status parse(std::map<std::string, std::string> env, Settings* out) {
  return Settings::from_env(out, [&env](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Settings, DefaultsWithAnEmptyEnvironment) {
  Settings s;
  ASSERT_TRUE(parse({}, &s).ok());
  EXPECT_TRUE(s.pause);
  EXPECT_EQ(s.checkpoint_dir, "");
  EXPECT_EQ(s.checkpoint_every, 0);
  EXPECT_EQ(s.keep_last, 3);
  EXPECT_EQ(s.gpu_release, GpuRelease::off);
  EXPECT_FALSE(s.hydro_allocator);
}

TEST(Settings, ReadsEveryVariable) {
  Settings s;
  ASSERT_TRUE(parse({{"HYDRO_PAUSE", "off"},
                     {"HYDRO_CKPT_DIR", "/ck"},
                     {"HYDRO_RESUME_FROM", "/ck/step-000000000001"},
                     {"HYDRO_CKPT_EVERY", "50"},
                     {"HYDRO_KEEP_LAST", "0"},
                     {"HYDRO_GPU_RELEASE", "full"},
                     {"HYDRO_GPU_ALLOCATOR", "hydro"},
                     {"HYDRO_CKPT_DIRECT_IO", "off"}},
                    &s)
                  .ok());
  EXPECT_FALSE(s.pause);
  EXPECT_EQ(s.checkpoint_dir, "/ck");
  EXPECT_EQ(s.resume_from, "/ck/step-000000000001");
  EXPECT_EQ(s.checkpoint_every, 50);
  EXPECT_EQ(s.keep_last, 0);
  EXPECT_EQ(s.gpu_release, GpuRelease::full);
  EXPECT_TRUE(s.hydro_allocator);
  EXPECT_FALSE(s.direct_io);
}

TEST(Settings, BadValuesNameTheVariable) {
  Settings s;
  EXPECT_EQ(parse({{"HYDRO_PAUSE", "banana"}}, &s).message(), "HYDRO_PAUSE: 'banana' is not on or off");
  EXPECT_EQ(parse({{"HYDRO_CKPT_DIR", "ck"}}, &s).message(), "HYDRO_CKPT_DIR='ck' must be an absolute path");
  EXPECT_EQ(parse({{"HYDRO_CKPT_EVERY", "ten"}}, &s).message(), "HYDRO_CKPT_EVERY='ten' is not a whole number");
  EXPECT_EQ(parse({{"HYDRO_CKPT_EVERY", "-1"}}, &s).message(),
            "HYDRO_CKPT_EVERY=-1 is out of range [0, 9223372036854775807]");
  EXPECT_EQ(parse({{"HYDRO_KEEP_LAST", "5x"}}, &s).message(), "HYDRO_KEEP_LAST='5x' is not a whole number");
  EXPECT_EQ(parse({{"HYDRO_GPU_RELEASE", "on"}}, &s).message(), "HYDRO_GPU_RELEASE='on' is not off, cache or full");
  EXPECT_EQ(parse({{"HYDRO_GPU_ALLOCATOR", "vmm"}}, &s).message(), "HYDRO_GPU_ALLOCATOR='vmm' is not torch or hydro");
  EXPECT_EQ(parse({{"HYDRO_CKPT_DIRECT_IO", "fast"}}, &s).message(), "HYDRO_CKPT_DIRECT_IO: 'fast' is not on or off");
  EXPECT_EQ(parse({{"HYDRO_SUSPEND_CHECKPOINT", "on"}}, &s).message(),
            "HYDRO_SUSPEND_CHECKPOINT='on' is not auto or off");
  EXPECT_EQ(parse({{"HYDRO_SIGNALS", "pause=NOPE"}}, &s).message(), "HYDRO_SIGNALS: unknown signal 'NOPE'");
  EXPECT_EQ(parse({{"HYDRO_CKPT_MODE", "sync"}}, &s).message(),
            "HYDRO_CKPT_MODE='sync' is not sync_any, sync_all or async");
  EXPECT_EQ(parse({{"HYDRO_STORE_TIMEOUT", "0"}}, &s).message(), "HYDRO_STORE_TIMEOUT=0 is out of range [1, 604800]");
  EXPECT_EQ(parse({{"HYDRO_CKPT_FAILURE_GRACE", "1m"}}, &s).message(),
            "HYDRO_CKPT_FAILURE_GRACE='1m' is not a whole number");
}

TEST(Settings, CheckpointModeAndStoreTimeout) {
  Settings s;
  ASSERT_TRUE(parse({}, &s).ok());
  EXPECT_EQ(s.mode, CheckpointMode::sync_any);
  EXPECT_EQ(s.store_timeout_s, 1800);
  for (auto [text, mode] : {std::pair<const char*, CheckpointMode>{"sync_any", CheckpointMode::sync_any},
                            {"sync_all", CheckpointMode::sync_all},
                            {"async", CheckpointMode::async}}) {
    ASSERT_TRUE(parse({{"HYDRO_CKPT_MODE", text}, {"HYDRO_STORE_TIMEOUT", "30"}}, &s).ok());
    EXPECT_EQ(s.mode, mode);
    EXPECT_STREQ(mode_name(s.mode), text);
    EXPECT_EQ(s.store_timeout_s, 30);
  }
}

TEST(Settings, GpuReleaseTakesEachValue) {
  Settings s;
  for (GpuRelease g : {GpuRelease::off, GpuRelease::cache, GpuRelease::full}) {
    ASSERT_TRUE(parse({{"HYDRO_GPU_RELEASE", gpu_release_name(g)}}, &s).ok());
    EXPECT_EQ(s.gpu_release, g);
  }
}

// The variable it replaced is refused, naming the new one, never ignored: a job that asked for a
// release must not run without one unknowingly.
TEST(Settings, TheReplacedCudaReleaseNamesGpuRelease) {
  Settings s;
  EXPECT_EQ(parse({{"HYDRO_CUDA_RELEASE", "on"}}, &s).message(),
            "HYDRO_CUDA_RELEASE='on' is no longer read: set HYDRO_GPU_RELEASE=cache instead (what "
            "HYDRO_CUDA_RELEASE=on did), or =full or =off");
}

}  // namespace
}  // namespace hydro
