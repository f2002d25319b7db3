// Issue 33: hydro-cuda-checkpoint, the helper that makes the driver's process-checkpoint calls for
// the training process, and its client (hydro/cuda_checkpoint.h), run for real as processes. The
// driver is a stand-in (fake_libcuda.cpp): no GPU or driver is in CI. With the driver's own calls,
// scripts/gpu-check runs them on a GPU machine.
#include "hydro/cuda_checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "hydro/gpu_release.h"
#include "fault_fs.h"

namespace hydro {
namespace {

using std::chrono::milliseconds;

struct Helper {
  test::TempDir dir;
  std::string log = dir.path + "/calls";
  std::unique_ptr<CudaCheckpointHelper> h;

  explicit Helper(const char* fail = "") {
    ::setenv("HYDRO_FAKE_CUDA_LOG", log.c_str(), 1);
    ::setenv("HYDRO_FAKE_CUDA_FAIL", fail, 1);
  }
  Status start() { return CudaCheckpointHelper::start(HYDRO_CUDA_CHECKPOINT_BIN, 0, HYDRO_FAKE_LIBCUDA, &h); }
  // The calls the driver saw, one a line, with this process's pid as "P".
  std::string calls() const {
    std::ifstream f(log);
    std::stringstream s;
    s << f.rdbuf();
    std::string text = s.str(), pid = " " + std::to_string(::getpid());
    for (size_t at; (at = text.find(pid)) != std::string::npos;) text.replace(at, pid.size(), " P");
    return text;
  }
};

TEST(CudaCheckpointHelper, MovesThisProcessThroughTheDriversStatesInOrder) {
  Helper t;
  ASSERT_TRUE(t.start().ok());
  std::string state;
  ASSERT_TRUE(t.h->lock(milliseconds(500)).ok());
  ASSERT_TRUE(t.h->checkpoint().ok());
  ASSERT_TRUE(t.h->state(&state).ok());
  EXPECT_EQ(state, "checkpointed");
  ASSERT_TRUE(t.h->restore().ok());
  ASSERT_TRUE(t.h->unlock().ok());
  ASSERT_TRUE(t.h->state(&state).ok());
  EXPECT_EQ(state, "running");
  EXPECT_EQ(t.calls(), "init 0 0\nlock P 500\ncheckpoint P\nrestore P\nunlock P\n");
}

TEST(CudaCheckpointHelper, ADriverErrorNamesTheCallAndTheError) {
  Helper t("checkpoint");
  ASSERT_TRUE(t.start().ok());
  ASSERT_TRUE(t.h->lock(milliseconds(100)).ok());
  EXPECT_EQ(t.h->checkpoint().message(), "cuCheckpointProcessCheckpoint: CUDA_ERROR_UNKNOWN (999)");
  EXPECT_EQ(t.h->restore().message(), "cuCheckpointProcessRestore: CUDA_ERROR_ILLEGAL_STATE (401)");
}

TEST(CudaCheckpointHelper, ACommandCanBeMadeToFailOnPurpose) {
  Helper t;
  ::setenv("HYDRO_CUDA_CHECKPOINT_FAIL", "lock", 1);
  ASSERT_TRUE(t.start().ok());
  ::unsetenv("HYDRO_CUDA_CHECKPOINT_FAIL");
  EXPECT_EQ(t.h->lock(milliseconds(100)).message(), "lock: failed on purpose (HYDRO_CUDA_CHECKPOINT_FAIL)");
  EXPECT_EQ(t.calls(), "init 0 0\n") << "the driver was not called";
}

TEST(CudaCheckpointHelper, AStartThatCannotWorkSaysWhy) {
  std::unique_ptr<CudaCheckpointHelper> h;
  Status s = CudaCheckpointHelper::start("/nonexistent/hydro-cuda-checkpoint", 0, "", &h);
  EXPECT_NE(s.message().find("cannot start /nonexistent/hydro-cuda-checkpoint: No such file"), std::string::npos)
      << s.message();
  s = CudaCheckpointHelper::start(HYDRO_CUDA_CHECKPOINT_BIN, 0, "/nonexistent/libcuda.so.1", &h);
  EXPECT_NE(s.message().find("cannot load the CUDA driver /nonexistent/libcuda.so.1"), std::string::npos)
      << s.message();
  Helper t("init");
  EXPECT_NE(t.start().message().find("cuInit: CUDA_ERROR_UNKNOWN"), std::string::npos);
  EXPECT_EQ(h, nullptr);
}

// Slurm signals every process of a step: the helper must neither stop on SIGTSTP nor end on
// SIGTERM or the pause signals while the training process still needs it.
TEST(CudaCheckpointHelper, TheJobsSignalsDoNotStopOrEndIt) {
  Helper t;
  ASSERT_TRUE(t.start().ok());
  for (int sig : {SIGTSTP, SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP, SIGWINCH}) ::kill(t.h->pid(), sig);
  std::string state;
  EXPECT_TRUE(t.h->state(&state).ok());
  EXPECT_EQ(state, "running");
}

// The release's order and fallbacks (hydro/gpu_release.h) through the real helper: a checkpoint
// the driver refuses is undone (unlocked), the cache is released, and nothing comes back after.
TEST(CudaCheckpointHelper, AFailedCheckpointThroughTheHelperFallsBackToTheCache) {
  Helper t("checkpoint");
  ASSERT_TRUE(t.start().ok());
  std::vector<std::string> logs;
  DeviceCalls c;
  c.device_bytes = [] { return uint64_t{1} << 20; };
  c.host_available = [] { return HostRoom{uint64_t{8} << 30, "MemAvailable in /proc/meminfo"}; };
  c.release_cache = [] { return Status::OK(); };
  c.suspend_collectives = [] { return Status::OK(); };
  c.resume_collectives = [] { return Status::OK(); };
  c.lock = [&](milliseconds ms) { return t.h->lock(ms); };
  c.checkpoint = [&] { return t.h->checkpoint(); };
  c.restore = [&] { return t.h->restore(); };
  c.unlock = [&] { return t.h->unlock(); };
  GpuReleaser r(GpuRelease::full, c, [&](const std::string& l) { logs.push_back(l); });
  EXPECT_EQ(r.release(milliseconds(300)), GpuRelease::cache);
  EXPECT_TRUE(r.restore().ok());
  EXPECT_EQ(t.calls(), "init 0 0\nlock P 300\ncheckpoint P\nunlock P\n");
  ASSERT_FALSE(logs.empty());
  EXPECT_NE(logs.back().find("moving the device state to host memory (cuCheckpointProcessCheckpoint: "
                             "CUDA_ERROR_UNKNOWN (999)): releasing the cache only"),
            std::string::npos)
      << logs.back();
}

TEST(CudaCheckpointHelper, HelpTellsWhatItReads) {
  const std::string cmd = std::string(HYDRO_CUDA_CHECKPOINT_BIN) + " --help";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[1024] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, p);
  EXPECT_EQ(::pclose(p), 0);
  EXPECT_NE(std::string(buf, n).find("usage: hydro-cuda-checkpoint --pid PID [--libcuda PATH]"), std::string::npos);
}

}  // namespace
}  // namespace hydro
