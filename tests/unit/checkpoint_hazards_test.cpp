// The checkpoint directory against what others do to it: files swapped for symlinks or FIFOs,
// several tasks cleaning one crash's leftovers at once, a manifest that fails to read once, a root
// other users can write to, another machine's writer on a shared directory, a listing that fails.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/manifest.h"
#include "hydro/resume_choice.h"

namespace hydro {
namespace {

using test::FaultFs;
using test::TempDir;
using test::write_checkpoint;

// A symlink or a FIFO in place of a checkpoint file (hydroctl status, resume) is a corrupt
// checkpoint: never followed, never waited on.
TEST(CheckpointDir, ASymlinkOrAFifoInACheckpointIsCorruptionNotFollowed) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 1).ok());
  const std::string file = t.path + "/step-000000000001/optimizer.pt";
  ASSERT_EQ(::rename(file.c_str(), (t.path + "/elsewhere").c_str()), 0);
  ASSERT_EQ(::symlink((t.path + "/elsewhere").c_str(), file.c_str()), 0);
  Status s = dir.verify("step-000000000001");
  EXPECT_EQ(s.code(), Code::corruption);
  EXPECT_EQ(s.message(), "checkpoint file " + file + ": " + file + " is a symlink; hydro does not follow it");
  ASSERT_EQ(::unlink(file.c_str()), 0);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  s = dir.verify("step-000000000001");  // would block forever on open() without a writer
  EXPECT_EQ(s.code(), Code::corruption);
  EXPECT_EQ(s.message(), "checkpoint file " + file + ": " + file + " is not a regular file");
}

// The tasks of a node all open the directory after a crash mid-save, and all clean the same dead
// writer's staging at once: each one succeeds (a name another task removed first counts as
// removed), and the staging is gone.
TEST(CheckpointDir, TasksCleaningTheSameStaleStagingAtOnceAllSucceed) {
  for (int trial = 0; trial < 20; ++trial) {
    TempDir t;
    const std::string stale = t.path + "/.tmp-step-000000000009.999999999.0";
    for (int d = 0; d < 8; ++d) {
      const std::string sub = stale + "/rank-" + std::to_string(d);
      ASSERT_TRUE(posix_fs().make_dirs(sub, 0700).ok());
      for (int f = 0; f < 30; ++f) std::ofstream(sub + "/f" + std::to_string(f)) << "x";
    }
    std::vector<Status> got(4);
    std::vector<std::thread> tasks;
    for (int i = 0; i < 4; ++i) tasks.emplace_back([&, i] { got[i] = CheckpointDir(t.path).open(); });
    for (auto& th : tasks) th.join();
    for (const auto& s : got) EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_FALSE(posix_fs().exists(stale));
  }
}

// A force_save whose manifest cannot be read when keep_last prunes (once: a hiccup) stays.
TEST(CheckpointDir, AForceSaveWhoseManifestFailsToReadIsNotPruned) {
  test::TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs, /*keep_last=*/1);
  ASSERT_TRUE(dir.open().ok());
  for (int step = 1; step <= 3; ++step) {
    if (step == 3) fs.fail_read_of = t.path + "/" + CheckpointDir::name_for(1) + "/" + Manifest::kFileName;
    std::unique_ptr<CheckpointWriter> w;
    ASSERT_TRUE(dir.begin(step, &w).ok());
    ASSERT_TRUE(w->write_file("model.pt", "w" + std::to_string(step)).ok());
    w->set_keep(step == 1);
    ASSERT_TRUE(w->commit().ok());
  }
  std::vector<std::string> names;
  for (const auto& c : dir.list()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{CheckpointDir::name_for(1), CheckpointDir::name_for(3)}));
}

// A prune that fails is housekeeping, not a commit of uncertain durability: the commit is ok, the
// old checkpoint stays for the next prune, and the next commit removes it.
TEST(CheckpointDir, AFailedPruneLeavesTheCommitOkAndTheNextPruneTakesIt) {
  test::TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs, /*keep_last=*/1);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 1).ok());
  fs.fail_remove_of = t.path + "/" + CheckpointDir::name_for(1);
  Status s = write_checkpoint(dir, 2);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::string latest;
  ASSERT_TRUE(posix_fs().read_link(t.path + "/latest", &latest).ok());
  EXPECT_EQ(latest, CheckpointDir::name_for(2));
  EXPECT_TRUE(posix_fs().exists(fs.fail_remove_of));
  fs.fail_remove_of.clear();
  ASSERT_TRUE(write_checkpoint(dir, 3).ok());
  std::vector<std::string> names;
  for (const auto& c : dir.list()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{CheckpointDir::name_for(3)}));
}

// A root that another user owns, or that others can write to, could hold a planted `latest` and
// checkpoint: refused for writing and for resuming, naming the directory and the fix.
TEST(CheckpointDir, ARootOthersCanWriteToIsRefusedForSavingAndResuming) {
  TempDir t;
  const std::string root = t.path + "/ck";
  {
    CheckpointDir dir(root);
    ASSERT_TRUE(dir.open().ok());
    ASSERT_TRUE(write_checkpoint(dir, 5).ok());
  }
  ASSERT_EQ(::chmod(root.c_str(), 0770), 0);
  Status s = CheckpointDir(root).open();
  EXPECT_EQ(s.message(), "checkpoint directory " + root +
                             " has mode 0770: other users could plant a checkpoint "
                             "that the job loads; refusing it (chmod go-w " +
                             root + ")");
  Settings settings;
  settings.checkpoint_dir = root;
  ResumeChoice c;
  EXPECT_EQ(choose_resume(
                posix_fs(), settings, nullptr, [](const std::string&) {}, &c)
                .message(),
            s.message());
  settings.resume_from = root + "/step-000000000005";
  EXPECT_EQ(choose_resume(
                posix_fs(), settings, nullptr, [](const std::string&) {}, &c)
                .message(),
            s.message());
  ASSERT_EQ(::chmod(root.c_str(), 0700), 0);
  EXPECT_TRUE(choose_resume(
                  posix_fs(), settings, nullptr, [](const std::string&) {}, &c)
                  .ok());

  ASSERT_EQ(::chmod(t.path.c_str(), 0777), 0);  // a parent anyone may rename things in
  s = CheckpointDir(root).open();
  EXPECT_EQ(s.message(), "checkpoint directory " + root + ": " + t.path +
                             " above it is writable by everyone without "
                             "the sticky bit (mode 0777), so anyone could replace the directory; refusing it");
  ASSERT_EQ(::chmod(t.path.c_str(), 01777), 0);  // like /tmp: fine
  EXPECT_TRUE(CheckpointDir(root).open().ok());
  ASSERT_EQ(::chmod(t.path.c_str(), 0700), 0);

  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(root.c_str(), 65534, 65534), 0);
    s = CheckpointDir(root).open();
    EXPECT_EQ(s.message(),
              "checkpoint directory " + root +
                  " is owned by uid 65534, not by uid 0 who runs the job: its "
                  "owner could plant a checkpoint that the job loads; refusing it (give a directory of your own)");
  }
}

// On a shared directory, a staging directory of a writer on another machine cannot be judged by
// its pid here: it is kept, unless it is over a day old. One of this machine's dead writers goes.
TEST(CheckpointDir, AnotherMachinesStagingIsKeptUnlessADayOld) {
  TempDir t;
  const std::string other = t.path + "/.tmp-step-000000000009.999999999.0@another-node";
  const std::string stale_other = t.path + "/.tmp-step-000000000008.999999999.0@another-node";
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string dead_here = t.path + "/.tmp-step-000000000007.999999999.0@" + host;
  for (const auto& d : {other, stale_other, dead_here}) ASSERT_TRUE(posix_fs().make_dir(d, 0700).ok());
  struct timeval two_days_ago[2];
  ::gettimeofday(&two_days_ago[0], nullptr);
  two_days_ago[0].tv_sec -= 2 * 24 * 3600;
  two_days_ago[1] = two_days_ago[0];
  ASSERT_EQ(::utimes(stale_other.c_str(), two_days_ago), 0);
  ASSERT_TRUE(CheckpointDir(t.path).open().ok());
  EXPECT_TRUE(posix_fs().exists(other)) << "another machine's live writer's staging was removed";
  EXPECT_FALSE(posix_fs().exists(stale_other));
  EXPECT_FALSE(posix_fs().exists(dead_here));
}

// The same step committed again (a job resumed from an older checkpoint got here again): when the
// new one cannot be renamed into place, the old one is put back, not lost.
TEST(CheckpointDir, ARecommitThatFailsPutsTheEarlierCheckpointBack) {
  TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 5, "first").ok());
  // The commit's renames: staging -> step (refused: it exists), step -> aside, staging -> step.
  fs.fail_rename_noreplace_at = fs.renames_noreplace + 2;
  EXPECT_FALSE(write_checkpoint(dir, 5, "second").ok());
  Manifest m;
  EXPECT_TRUE(dir.verify("step-000000000005", &m).ok()) << "the earlier step 5 was lost";
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 5);
}

// Resumed from step 100 while 200 and 300 exist: the job's new checkpoints (150, 160, 170) are
// the ones kept, in commit order, and a corrupt newest one falls back to the one committed before
// it, not to the old, higher step of another history.
TEST(CheckpointDir, PruningAndFallbackGoByCommitOrderNotStep) {
  TempDir t;
  CheckpointDir dir(t.path, posix_fs(), /*keep_last=*/3);
  ASSERT_TRUE(dir.open().ok());
  for (int step : {100, 200, 300}) ASSERT_TRUE(write_checkpoint(dir, step).ok());
  auto names = [&] {
    std::set<int64_t> steps;
    for (const auto& c : dir.list()) steps.insert(c.step);
    return steps;
  };
  ASSERT_TRUE(write_checkpoint(dir, 150).ok());
  EXPECT_EQ(names(), (std::set<int64_t>{150, 200, 300}));
  ASSERT_TRUE(write_checkpoint(dir, 160).ok());
  EXPECT_EQ(names(), (std::set<int64_t>{150, 160, 300})) << "the fresh 150 was pruned before the stale 200";
  {
    std::fstream f(t.path + "/step-000000000160/optimizer.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('X');
  }
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 150) << "fell back to another history's step";
  ASSERT_TRUE(write_checkpoint(dir, 170).ok());
  EXPECT_EQ(names(), (std::set<int64_t>{150, 160, 170}));
}

TEST(CheckpointDir, AProtectedCheckpointIsNeverPruned) {
  TempDir t;
  CheckpointDir dir(t.path, posix_fs(), /*keep_last=*/1);
  ASSERT_TRUE(dir.open().ok());
  dir.protect("step-000000000001");
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE(write_checkpoint(dir, step).ok());
  EXPECT_TRUE(posix_fs().exists(t.path + "/step-000000000001"));
  EXPECT_FALSE(posix_fs().exists(t.path + "/step-000000000002"));
  EXPECT_TRUE(posix_fs().exists(t.path + "/step-000000000003"));
}

// A directory that fails to list (a disk or NFS hiccup) is an error for the resume, never "no
// checkpoint": the job would start afresh, and its new checkpoints would prune the old ones.
TEST(CheckpointDir, AListingThatFailsIsAnErrorNotAFreshStart) {
  TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs, 2);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 1).ok());
  ASSERT_TRUE(write_checkpoint(dir, 2).ok());
  ASSERT_EQ(::truncate((t.path + "/step-000000000002/model.pt").c_str(), 0), 0);  // latest fails: fall back
  fs.fail_list_of = t.path;
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  Status s = dir.latest_valid(&found, &warnings);
  EXPECT_EQ(s.message(), "list " + t.path + ": Input/output error");
  EXPECT_FALSE(found);
  EXPECT_FALSE(write_checkpoint(dir, 3).ok()) << "a commit that cannot order itself among the others";
  fs.fail_list_of.clear();
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 1);
}

TEST(CheckpointDir, ARootNotMadeYetIsAFreshStart) {
  TempDir t;
  CheckpointDir dir(t.path + "/not-yet");
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  EXPECT_FALSE(found);
  EXPECT_TRUE(warnings.empty());
}

}  // namespace
}  // namespace hydro
