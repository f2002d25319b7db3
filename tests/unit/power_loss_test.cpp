// Crash consistency under a power loss, not only a killed process: CrashFs drops every write and
// every directory change not yet made durable by an fsync. At each change of a run of commits
// (with pruning and a re-commit of a step) the power goes; after the rollback, `latest` names a
// complete checkpoint, and no commit that returned OK is lost.
#include <gtest/gtest.h>

#include "crash_fs.h"
#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"

namespace hydro {
namespace {

constexpr int64_t kSteps[] = {1, 2, 3, 2};  // the last: a job resumed from step 2 commits it again

// Commits kSteps in order, keeping the last 2, until one fails. Returns how many returned OK.
int commit_until_the_power_goes(Fs& fs, const std::string& root) {
  CheckpointDir dir(root, fs, /*keep_last=*/2);
  if (!dir.open().ok()) return 0;
  int acknowledged = 0;
  for (int64_t step : kSteps) {
    if (!test::write_checkpoint(dir, step, "weights of step ").ok()) break;
    ++acknowledged;
  }
  return acknowledged;
}

TEST(PowerLoss, LatestNamesACompleteCheckpointAndNoAcknowledgedCommitIsLost) {
  int total = 0;
  {
    test::TempDir t;
    test::CrashFs fs(t.path, -1);
    ASSERT_EQ(commit_until_the_power_goes(fs, t.path + "/ck"), 4);
    total = fs.changes();
  }
  ASSERT_GT(total, 40);
  for (int crash_at = 0; crash_at < total; ++crash_at) {
    SCOPED_TRACE("power lost at change " + std::to_string(crash_at) + " of " + std::to_string(total));
    test::TempDir t;
    const std::string root = t.path + "/ck";
    test::CrashFs fs(t.path, crash_at);
    const int acknowledged = commit_until_the_power_goes(fs, root);
    ASSERT_TRUE(fs.crashed());
    fs.power_loss();

    if (!posix_fs().exists(root)) {
      EXPECT_EQ(acknowledged, 0) << "the checkpoint directory is gone";
      continue;
    }
    CheckpointDir dir(root);
    std::string latest;
    if (posix_fs().read_link(root + "/latest", &latest).ok())
      EXPECT_TRUE(dir.verify(latest).ok()) << "latest names " << latest << ": " << dir.verify(latest).message();
    if (acknowledged == 0) continue;
    std::optional<CheckpointInfo> found;
    std::vector<std::string> warnings;
    ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
    ASSERT_TRUE(found) << acknowledged << " commits were acknowledged, and no checkpoint is left";
    EXPECT_EQ(found->name, latest);
    // The last acknowledged commit, or the one the power cut short if it got through.
    const int64_t last = kSteps[acknowledged - 1];
    const int64_t next = acknowledged < 4 ? kSteps[acknowledged] : last;
    EXPECT_TRUE(found->step == last || found->step == next)
        << "resumes from step " << found->step << "; the last acknowledged commit was of step " << last;
  }
}

}  // namespace
}  // namespace hydro
