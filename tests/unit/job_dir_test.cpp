// make_job_dir: the per-job checkpoint directory, made without following any symlink below the
// admin's prefix. These run as whoever runs the tests; CI runs them as root, which is the case
// that matters (a root process must not follow a planted symlink either).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "fault_fs.h"
#include "job_dir.h"

namespace hydro::spank {
namespace {

mode_t mode_of(const std::string& p) {
  struct stat st;
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

TEST(JobDir, MakesEachComponentMode0700AndIsIdempotent) {
  test::TempDir t;
  ::chmod(t.path.c_str(), 01777);
  std::string out;
  Status st = make_job_dir(t.path + "/%u/%j", "alice", 1001, 42, &out);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(out, t.path + "/alice/42");
  EXPECT_EQ(mode_of(t.path + "/alice"), 0700u);
  EXPECT_EQ(mode_of(t.path + "/alice/42"), 0700u);
  // Every task of the job calls it: the second call finds the same directory.
  ASSERT_TRUE(make_job_dir(t.path + "/%u/%j", "alice", 1001, 42, &out).ok());
  EXPECT_EQ(out, t.path + "/alice/42");
}

TEST(JobDir, ASymlinkPlantedForTheUserIsRefusedAndItsTargetUntouched) {
  test::TempDir t;
  ::chmod(t.path.c_str(), 01777);
  ASSERT_EQ(::mkdir((t.path + "/victim").c_str(), 0755), 0);
  ASSERT_EQ(::symlink((t.path + "/victim").c_str(), (t.path + "/alice").c_str()), 0);
  std::string out;
  Status st = make_job_dir(t.path + "/%u/%j", "alice", 1001, 42, &out);
  EXPECT_EQ(st.message(), t.path + "/alice is a symlink; hydro does not follow it (remove it)");
  struct stat s;
  EXPECT_NE(::stat((t.path + "/victim/42").c_str(), &s), 0) << "the plugin followed the symlink";
}

TEST(JobDir, ASymlinkAtTheJobComponentIsRefused) {
  test::TempDir t;
  ASSERT_EQ(::mkdir((t.path + "/alice").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("/etc", (t.path + "/alice/42").c_str()), 0);
  std::string out;
  EXPECT_EQ(make_job_dir(t.path + "/%u/%j", "alice", 1001, 42, &out).message(),
            t.path + "/alice/42 is a symlink; hydro does not follow it (remove it)");
}

TEST(JobDir, AComponentOwnedBySomeoneElseIsRefused) {
  ASSERT_EQ(::geteuid(), 0u) << "this test needs root, to give a directory to another uid";
  test::TempDir t;
  ASSERT_EQ(::mkdir((t.path + "/alice").c_str(), 0777), 0);
  ASSERT_EQ(::chown((t.path + "/alice").c_str(), 4242, 4242), 0);
  std::string out;
  EXPECT_EQ(make_job_dir(t.path + "/%u/%j", "alice", 1001, 42, &out).message(),
            t.path + "/alice is owned by uid 4242, not by uid 0 who runs the job; refusing it");
}

TEST(JobDir, AFileInTheWayIsRefused) {
  test::TempDir t;
  std::ofstream(t.path + "/alice") << "x";
  std::string out;
  EXPECT_EQ(make_job_dir(t.path + "/%u/%j", "alice", 1001, 42, &out).message(),
            t.path + "/alice exists and is not a directory");
}

TEST(JobDir, AMissingAdminPrefixIsRefused) {
  std::string out;
  EXPECT_EQ(make_job_dir("/nonexistent-hydro/%u/%j", "alice", 1001, 42, &out).message(),
            "checkpoint directory from the template '/nonexistent-hydro/%u/%j': the admin's directory "
            "/nonexistent-hydro is not usable (create it, mode 1777): No such file or directory");
}

TEST(JobDir, AWorldWritablePrefixWithoutTheStickyBitIsRefused) {
  test::TempDir t;
  ::chmod(t.path.c_str(), 0777);
  std::string out;
  EXPECT_EQ(make_job_dir(t.path + "/%u/%j", "alice", 1001, 42, &out).message(),
            "checkpoint directory from the template '" + t.path + "/%u/%j': " + t.path +
                " is writable by everyone without the sticky bit; refusing (chmod +t " + t.path + ")");
}

TEST(JobDir, AUserNameThatIsNotADirectoryNameIsRefused) {
  test::TempDir t;
  std::string out;
  EXPECT_EQ(make_job_dir(t.path + "/%u/%j", "..", 1001, 42, &out).message(),
            "checkpoint directory from the template '" + t.path +
                "/%u/%j': component '%u' expands to '..', "
                "not a directory name");
}

}  // namespace
}  // namespace hydro::spank
