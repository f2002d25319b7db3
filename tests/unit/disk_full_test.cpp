// A real full disk: a 1 MiB tmpfs mounted by the test (needs root, as CI runs). The checkpoint
// that does not fit fails with ENOSPC naming the file, is not committed, leaves the previous
// checkpoint intact and `latest` on it, and a later checkpoint that fits commits.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fault_fs.h"
#include "hydro/atomic_file.h"
#include "hydro/checkpoint_dir.h"

namespace hydro {
namespace {

struct SmallFs {
  test::TempDir dir;
  bool mounted = false;
  SmallFs() {
    mounted = ::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, "size=1m,mode=0700") == 0;
    err = errno;
  }
  ~SmallFs() {
    if (mounted) ::umount2(dir.path.c_str(), MNT_DETACH);
  }
  int err = 0;
};

Status checkpoint(CheckpointDir& dir, int64_t step, size_t bytes) {
  std::unique_ptr<CheckpointWriter> w;
  HYDRO_RETURN_IF_ERROR(dir.begin(step, &w));
  HYDRO_RETURN_IF_ERROR(w->write_file("model.pt", std::string(bytes, 'm')));
  return w->commit();
}

TEST(DiskFull, CheckpointThatDoesNotFitFailsClearlyAndThePreviousStaysLatest) {
  SmallFs small;
  ASSERT_TRUE(small.mounted) << "mounting a 1 MiB tmpfs failed (" << std::strerror(small.err)
                             << "): this test needs root";
  CheckpointDir dir(small.dir.path + "/ck");
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(checkpoint(dir, 1, 300 << 10).ok());
  Status s = checkpoint(dir, 2, 900 << 10);
  EXPECT_EQ(s.code(), Code::io);
  EXPECT_NE(s.message().find("write " + small.dir.path + "/ck/.tmp-step-000000000002"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("/model.pt: No space left on device"), std::string::npos) << s.message();
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 1);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(dir.list().size(), 1u);
  // Training goes on: the space of the failed attempt was given back, so the next one fits.
  ASSERT_TRUE(checkpoint(dir, 3, 300 << 10).ok());
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  EXPECT_EQ(found->step, 3);
}

TEST(DiskFull, AtomicFileThatDoesNotFitLeavesTheOldFile) {
  SmallFs small;
  ASSERT_TRUE(small.mounted) << "mounting a 1 MiB tmpfs failed (" << std::strerror(small.err)
                             << "): this test needs root";
  const std::string path = small.dir.path + "/state.pt";
  auto write = [&](size_t n, char c) {
    return write_file_atomic(path, [&](WritableFile& f) {
      std::string bytes(n, c);
      return f.append(bytes.data(), bytes.size());
    });
  };
  ASSERT_TRUE(write(200 << 10, 'a').ok());
  Status s = write(2 << 20, 'b');
  EXPECT_EQ(s.code(), Code::io);
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  std::string now;
  ASSERT_TRUE(posix_fs().read_file(path, &now).ok());
  EXPECT_EQ(now, std::string(200 << 10, 'a'));
  std::vector<std::string> names;
  ASSERT_TRUE(posix_fs().list_dir(small.dir.path, &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"state.pt"}) << "the temporary file was left behind";
}

}  // namespace
}  // namespace hydro
