// The host memory a full GPU release may take (hydro/host_memory.h): MemAvailable, and what the
// memory cgroup limits above the process leave (v2, and v1 on a hybrid host).
#include "hydro/host_memory.h"

#include "fault_fs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

namespace hydro {
namespace {

TEST(HostMemory, MemAvailableIsReadInBytes) {
  EXPECT_EQ(mem_available_of("MemTotal:       16384000 kB\nMemFree:         1000 kB\nMemAvailable:    8192000 kB\n"),
            8192000ull * 1024);
  EXPECT_EQ(mem_available_of("MemTotal:       16384000 kB\n"), 0u);
  EXPECT_EQ(mem_available_of(""), 0u);
}

TEST(HostMemory, ACgroupLimitLeavesItsMaxOverItsCurrent) {
  EXPECT_EQ(cgroup_room_of("1073741824\n", "73741824\n"), 1000000000u);
  EXPECT_EQ(cgroup_room_of("100\n", "200\n"), 0u) << "over its limit: no room";
  EXPECT_EQ(cgroup_room_of("max\n", "200\n"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(cgroup_room_of("", ""), std::numeric_limits<uint64_t>::max()) << "no file: no limit known";
}

TEST(HostMemory, InactivePageCacheCountsAsRoom) {
  // A job's cgroup full of the data set it read once: the kernel drops that cache before any OOM.
  const std::string v2 = "anon 1000\nfile 9000\nactive_file 1000\ninactive_file 8000\n";
  EXPECT_EQ(inactive_file_of(v2), 8000u);
  EXPECT_EQ(cgroup_room_of("10000\n", "10000\n", v2), 8000u);
  EXPECT_EQ(inactive_file_of("inactive_file 10\ntotal_inactive_file 30\n"), 30u) << "v1: the hierarchy's";
  EXPECT_EQ(cgroup_room_of("100\n", "50\n", "inactive_file 80\n"), 100u) << "never more than the limit";
  EXPECT_EQ(inactive_file_of("garbage\n"), 0u);
}

TEST(HostMemory, TheMemoryCgroupIsV1sMemoryLineElseTheV2Line) {
  bool v1 = true;
  EXPECT_EQ(memory_cgroup_of("0::/system.slice/slurmstepd.scope/job_12/step_0/user/task_0\n", &v1),
            "/system.slice/slurmstepd.scope/job_12/step_0/user/task_0");
  EXPECT_FALSE(v1);
  EXPECT_EQ(memory_cgroup_of("5:devices:/\n4:memory:/slurm/uid_0/job_3/step_0\n0::/\n", &v1),
            "/slurm/uid_0/job_3/step_0");
  EXPECT_TRUE(v1) << "a hybrid host: the memory controller is v1's";
  EXPECT_EQ(memory_cgroup_of("3:cpu,memory:/x\n", &v1), "/x");
  EXPECT_TRUE(v1);
  EXPECT_EQ(memory_cgroup_of("1:name=systemd:/x\n", &v1), "");
  EXPECT_FALSE(v1);
}

uint64_t mem_available_now() {
  std::ifstream in("/proc/meminfo");
  return mem_available_of(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
}

// Read between two reads of MemAvailable: the tests beside this one allocate and free meanwhile.
TEST(HostMemory, ThisProcessHasSomeRoomAndNoMoreThanTheSystemHas) {
  const uint64_t before = mem_available_now();
  const uint64_t room = host_memory_available().bytes;
  const uint64_t after = mem_available_now();
  EXPECT_GT(room, 0u);
  EXPECT_LE(room, std::max(before, after) + (256ull << 20)) << "MemAvailable moves a little between the reads";
}

void write(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

// A GPU machine's layout (cgroup v2, a limit on the parent of the process's cgroup, none at the
// root, which has no memory.max): the least of MemAvailable and that limit's room.
TEST(HostMemory, CgroupV2WithALimitOnTheParentAndNoneAtTheRoot) {
  test::TempDir dir;
  const std::filesystem::path root = dir.path;
  write(root / "proc/meminfo",
        "MemTotal:       131981020 kB\nMemFree:        128123340 kB\nMemAvailable:   131373516 kB\n");
  write(root / "proc/self/cgroup", "0::/process_api/a95\n");
  write(root / "sys/fs/cgroup/process_api/a95/memory.max", "max\n");
  write(root / "sys/fs/cgroup/process_api/a95/memory.current", "6950912\n");
  write(root / "sys/fs/cgroup/process_api/memory.max", "137438953472\n");
  write(root / "sys/fs/cgroup/process_api/memory.current", "3429928960\n");
  write(root / "sys/fs/cgroup/process_api/memory.stat", "anon 2523136\nfile 3360825344\ninactive_file 429928960\n");
  write(root / "sys/fs/cgroup/memory.stat", "anon 2854912\n");
  HostRoom room = host_memory_available(root.string());
  EXPECT_EQ(room.bytes, 137438953472ull - 3000000000ull);
  EXPECT_EQ(room.bound_by, root.string() +
                               "/sys/fs/cgroup/process_api/memory.max (137438953472) less memory.current "
                               "(3429928960) with its inactive_file (429928960)");
  write(root / "proc/meminfo", "MemAvailable:   1024 kB\n");
  room = host_memory_available(root.string());
  EXPECT_EQ(room.bytes, 1024u * 1024);
  EXPECT_EQ(room.bound_by, "MemAvailable in /proc/meminfo");
}

// A job that cannot read MemAvailable gets no full release, and its log says what was read
// (inside a torch job on an H200 the old stream-based read gave 0 with 128 GiB free).
TEST(HostMemory, NoMemAvailableNamesWhatWasRead) {
  test::TempDir dir;
  const std::filesystem::path root = dir.path;
  write(root / "proc/self/cgroup", "");
  HostRoom room = host_memory_available(root.string());
  EXPECT_EQ(room.bytes, 0u);
  EXPECT_EQ(room.bound_by, "no MemAvailable in /proc/meminfo (read failed: open " + root.string() +
                               "/proc/meminfo: No such file or directory)");
  write(root / "proc/meminfo", "MemTotal:       131981020 kB\n");
  room = host_memory_available(root.string());
  EXPECT_EQ(room.bytes, 0u);
  EXPECT_EQ(room.bound_by, "no MemAvailable in /proc/meminfo (29 bytes read)");
}

TEST(HostMemory, ANumberIsReadOnlyAtItsKeyAtALineStart) {
  EXPECT_EQ(mem_available_of("XMemAvailable: 5 kB\nMemAvailable: 7 kB\n"), 7u * 1024);
  EXPECT_EQ(mem_available_of("MemAvailable: kB\n"), 0u);
  EXPECT_EQ(inactive_file_of("active_file 1\ninactive_file 2\n"), 2u);
}

}  // namespace
}  // namespace hydro
