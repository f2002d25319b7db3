// The checkpoint directory against what others do to it: files swapped for symlinks or FIFOs,
// several tasks cleaning one crash's leftovers at once, a manifest that fails to read once.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>
#include <vector>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/manifest.h"

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

}  // namespace
}  // namespace hydro
