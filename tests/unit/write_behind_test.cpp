// posix_fs() writes files bigger than one 8 MiB buffer on a thread of its own, and what lies past
// the first 128 MiB with O_DIRECT where the filesystem takes it. The bytes must come out exactly
// as appended, in pieces of any size, with O_DIRECT on or off, on tmpfs, and a full disk must fail
// the file with an error naming it, never a sync that succeeds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "fault_fs.h"
#include "hydro/durable_fs.h"
#include "write_behind.h"

namespace hydro {
namespace {

constexpr size_t kMiB = 1 << 20;

std::string pattern(size_t n) {
  std::string s(n, '\0');
  std::mt19937 rng(7);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Appends `data` in pieces of uneven sizes, as a serializer does (headers, then large tensors).
Status write_in_pieces(const std::string& path, const std::string& data) {
  std::unique_ptr<WritableFile> f;
  HYDRO_RETURN_IF_ERROR(posix_fs().new_writable(path, &f));
  const size_t pieces[] = {1, 63, 4096, 3 * kMiB + 5, 64, 16 * kMiB, 100};
  size_t off = 0;
  for (int i = 0; off < data.size(); ++i) {
    size_t n = std::min(pieces[i % 7], data.size() - off);
    HYDRO_RETURN_IF_ERROR(f->append(data.data() + off, n));
    off += n;
  }
  HYDRO_RETURN_IF_ERROR(f->sync());
  return f->close();
}

// Pages of `path` in the page cache, out of `bytes` from `offset`; SIZE_MAX if it cannot tell.
size_t resident_pages(const std::string& path, size_t offset, size_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SIZE_MAX;
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset));
  ::close(fd);
  if (m == MAP_FAILED) return SIZE_MAX;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  size_t n = SIZE_MAX;
  if (::mincore(m, bytes, v.data()) == 0) {
    n = 0;
    for (unsigned char c : v) n += c & 1;
  }
  ::munmap(m, bytes);
  return n;
}

// O_DIRECT that bypasses the page cache: tmpfs takes O_DIRECT from Linux 6.6 on, but its data
// lives in the page cache all the same.
bool takes_o_direct(const std::string& dir) {
  struct statfs st;
  if (::statfs(dir.c_str(), &st) != 0 || st.f_type == TMPFS_MAGIC) return false;
  int fd = ::open((dir + "/probe").c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  ::close(fd);
  ::unlink((dir + "/probe").c_str());
  return true;
}

struct Tmpfs {
  test::TempDir dir;
  bool mounted = false;
  int err = 0;
  explicit Tmpfs(const char* size) {
    mounted = ::mount("tmpfs", dir.path.c_str(), "tmpfs", 0, size) == 0;
    err = errno;
  }
  ~Tmpfs() {
    if (mounted) ::umount2(dir.path.c_str(), MNT_DETACH);
  }
};

class WriteBehindTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { set_direct_io(GetParam()); }
  void TearDown() override { set_direct_io(true); }
};

TEST_P(WriteBehindTest, BigFileComesOutExactlyAsAppended) {
  test::TempDir t;
  // Past the page-cache part, two full buffers and a tail.
  const size_t direct_from = WriteBehind::kDirectAfter;
  const std::string data = pattern(direct_from + 2 * WriteBehind::kBufferBytes + 12345);
  const std::string path = t.path + "/big.bin";
  ASSERT_TRUE(write_in_pieces(path, data).ok());
  if (GetParam() && takes_o_direct(t.path)) {
    // The full buffers past kDirectAfter went straight to the device: not in the page cache.
    EXPECT_EQ(resident_pages(path, direct_from, 2 * WriteBehind::kBufferBytes), 0u);
  }
  std::string back;
  ASSERT_TRUE(posix_fs().read_file(path, &back).ok());
  EXPECT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data);
}

TEST_P(WriteBehindTest, SmallFileAndExactBufferMultiple) {
  test::TempDir t;
  const size_t direct_from = WriteBehind::kDirectAfter;
  // Also a block-aligned tail right at the O_DIRECT switch, and one after a full buffer there.
  for (size_t n :
       {size_t{0}, size_t{1}, 8 * kMiB - 1, 8 * kMiB, 16 * kMiB, direct_from + 8192, direct_from + 8 * kMiB + 4096}) {
    const std::string data = pattern(n);
    const std::string path = t.path + "/f" + std::to_string(n);
    ASSERT_TRUE(write_in_pieces(path, data).ok()) << n;
    std::string back;
    ASSERT_TRUE(posix_fs().read_file(path, &back).ok());
    EXPECT_TRUE(back == data) << n;
  }
}

// tmpfs refuses O_DIRECT before Linux 6.6 (Debian 12 runs 6.1): every byte still gets there.
TEST_P(WriteBehindTest, TmpfsGetsEveryByte) {
  Tmpfs fs("size=200m");
  ASSERT_TRUE(fs.mounted) << "mounting a tmpfs failed (" << std::strerror(fs.err) << "): this test needs root";
  const std::string data = pattern(WriteBehind::kDirectAfter + 2 * 8 * kMiB + 777);
  ASSERT_TRUE(write_in_pieces(fs.dir.path + "/big.bin", data).ok());
  std::string back;
  ASSERT_TRUE(posix_fs().read_file(fs.dir.path + "/big.bin", &back).ok());
  EXPECT_TRUE(back == data);
}

TEST_P(WriteBehindTest, FullDiskFailsTheFileNamingIt) {
  Tmpfs fs("size=140m");
  ASSERT_TRUE(fs.mounted) << "mounting a tmpfs failed (" << std::strerror(fs.err) << "): this test needs root";
  const std::string path = fs.dir.path + "/big.bin";
  Status s = write_in_pieces(path, pattern(160 * kMiB));
  EXPECT_EQ(s.code(), Code::io);
  EXPECT_NE(s.message().find("write " + path + ": No space left on device"), std::string::npos) << s.message();
}

TEST_P(WriteBehindTest, AWriterThatIgnoresTheErrorNeverSyncsIntoSuccess) {
  Tmpfs fs("size=140m");
  ASSERT_TRUE(fs.mounted) << "mounting a tmpfs failed (" << std::strerror(fs.err) << "): this test needs root";
  const std::string path = fs.dir.path + "/big.bin";
  std::unique_ptr<WritableFile> f;
  ASSERT_TRUE(posix_fs().new_writable(path, &f).ok());
  const std::string chunk = pattern(5 * kMiB);
  for (int i = 0; i < 32; ++i) (void)f->append(chunk.data(), chunk.size());  // 160 MiB, errors ignored
  Status s = f->sync();
  EXPECT_EQ(s.code(), Code::io);
  EXPECT_NE(s.message().find("write " + path + ": No space left on device"), std::string::npos) << s.message();
  EXPECT_FALSE(f->sync().ok()) << "a second sync must not succeed either";
  EXPECT_FALSE(f->close().ok());
}

INSTANTIATE_TEST_SUITE_P(DirectIo, WriteBehindTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "on" : "off"; });

}  // namespace
}  // namespace hydro
