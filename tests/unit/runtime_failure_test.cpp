// A checkpoint of step_end that fails (a full disk): a warning while training goes on, until a run
// of failures is both long (3 in a row) and old (HYDRO_CKPT_FAILURE_GRACE); a commit ends the run.
#include <gtest/gtest.h>

#include <string>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/runtime.h"
#include "runtime_fixture.h"

namespace hydro {
namespace {

using test::make_model;
using test::RuntimeTest;

// HYDRO_CKPT_FAILURE_GRACE=0: the count alone.
TEST_F(RuntimeTest, AFailedCheckpointEveryNStepsIsAWarningUntilTheThirdInARow) {
  test::TempDir t;
  test::FaultFs fs;
  Settings s = settings(t.path);
  s.checkpoint_every = 1;
  s.checkpoint_failure_grace_s = 0;
  Runtime rt(s, fs);
  auto model = make_model();
  rt.track("model", *model);
  auto latest = [&] {
    std::string l;
    EXPECT_TRUE(posix_fs().read_link(t.path + "/latest", &l).ok());
    return l;
  };
  EXPECT_TRUE(rt.step_end(1));
  for (int step : {2, 3}) {
    fs.fail_write_at = fs.writes;  // ENOSPC
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(rt.step_end(step));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("WARNING: checkpoint of step " + std::to_string(step) + " failed"), std::string::npos) << err;
    EXPECT_EQ(latest(), "step-000000000001");
  }
  fs.fail_write_at = -1;
  EXPECT_TRUE(rt.step_end(4));
  EXPECT_EQ(latest(), "step-000000000004");
  for (int step : {5, 6}) {
    fs.fail_write_at = fs.writes;
    EXPECT_TRUE(rt.step_end(step));
  }
  fs.fail_write_at = fs.writes;
  EXPECT_THROW(rt.step_end(7), std::runtime_error);
  EXPECT_EQ(latest(), "step-000000000004");
}

// A checkpoint every step on a disk full for a while: within HYDRO_CKPT_FAILURE_GRACE (an hour here,
// which this test never reaches) no count of failures fails the step, and a commit ends the run.
TEST_F(RuntimeTest, FailedCheckpointsWithinTheGraceAreWarningsHoweverMany) {
  test::TempDir t;
  test::FaultFs fs;
  Settings s = settings(t.path);
  s.checkpoint_every = 1;
  s.checkpoint_failure_grace_s = 3600;
  Runtime rt(s, fs);
  auto model = make_model();
  rt.track("model", *model);
  EXPECT_TRUE(rt.step_end(1));
  ::testing::internal::CaptureStderr();
  for (int step = 2; step <= 9; ++step) {
    fs.fail_write_at = fs.writes;  // ENOSPC
    EXPECT_TRUE(rt.step_end(step));
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("failed (8 in a row"), std::string::npos) << err;
  EXPECT_NE(err.find("HYDRO_CKPT_FAILURE_GRACE"), std::string::npos) << err;
  fs.fail_write_at = -1;
  EXPECT_TRUE(rt.step_end(10));
  std::string l;
  EXPECT_TRUE(posix_fs().read_link(t.path + "/latest", &l).ok());
  EXPECT_EQ(l, "step-000000000010");
}

}  // namespace
}  // namespace hydro
