// A checkpoint of step_end that fails (a full disk): a warning while training goes on, until a run
// of failures is both long (3 in a row) and old (HYDRO_CKPT_FAILURE_GRACE); a commit ends the run.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/runtime.h"
#include "runtime_fixture.h"

namespace hydro {
namespace {

using test::make_model;
using test::RuntimeTest;

// A Runtime that checkpoints every step (a model tracked) onto a disk the test fills, with a grace.
struct FillableDisk {
  FillableDisk(Settings s, int64_t grace_s) : rt(every_step(std::move(s), grace_s), fs) { rt.track("model", *model); }
  static Settings every_step(Settings s, int64_t grace_s) {
    s.checkpoint_every = 1;
    s.checkpoint_failure_grace_s = grace_s;
    return s;
  }
  void fill() { fs.fail_write_at = fs.writes; }  // the next write fails with ENOSPC
  void empty() { fs.fail_write_at = -1; }
  std::string latest() {
    std::string l;
    EXPECT_TRUE(posix_fs().read_link(rt.settings().checkpoint_dir + "/latest", &l).ok());
    return l;
  }
  test::FaultFs fs;
  Runtime rt;
  torch::nn::Sequential model = make_model();
};

// HYDRO_CKPT_FAILURE_GRACE=0: the count alone.
TEST_F(RuntimeTest, AFailedCheckpointEveryNStepsIsAWarningUntilTheThirdInARow) {
  test::TempDir t;
  FillableDisk d(settings(t.path), 0);
  EXPECT_TRUE(d.rt.step_end(1));
  for (int step : {2, 3}) {
    d.fill();
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(d.rt.step_end(step));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("WARNING: checkpoint of step " + std::to_string(step) + " failed"), std::string::npos) << err;
    EXPECT_EQ(d.latest(), "step-000000000001");
  }
  d.empty();
  EXPECT_TRUE(d.rt.step_end(4));
  EXPECT_EQ(d.latest(), "step-000000000004");
  for (int step : {5, 6}) {
    d.fill();
    EXPECT_TRUE(d.rt.step_end(step));
  }
  d.fill();
  EXPECT_THROW(d.rt.step_end(7), std::runtime_error);
  EXPECT_EQ(d.latest(), "step-000000000004");
}

// A checkpoint every step on a disk full for a while: within HYDRO_CKPT_FAILURE_GRACE (an hour here,
// which this test never reaches) no count of failures fails the step, and a commit ends the run.
TEST_F(RuntimeTest, FailedCheckpointsWithinTheGraceAreWarningsHoweverMany) {
  test::TempDir t;
  FillableDisk d(settings(t.path), 3600);
  EXPECT_TRUE(d.rt.step_end(1));
  ::testing::internal::CaptureStderr();
  for (int step = 2; step <= 9; ++step) {
    d.fill();
    EXPECT_TRUE(d.rt.step_end(step));
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("failed (8 in a row"), std::string::npos) << err;
  EXPECT_NE(err.find("HYDRO_CKPT_FAILURE_GRACE"), std::string::npos) << err;
  d.empty();
  EXPECT_TRUE(d.rt.step_end(10));
  EXPECT_EQ(d.latest(), "step-000000000010");
}

}  // namespace
}  // namespace hydro
