// The host memory a full GPU release may take (hydro/host_memory.h): MemAvailable, and what the
// memory cgroup limits above the process leave (v2, and v1 on a hybrid host).
#include "hydro/host_memory.h"

#include <gtest/gtest.h>

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

TEST(HostMemory, ThisProcessHasSomeRoomAndNoMoreThanTheSystemHas) {
  const uint64_t room = host_memory_available();
  EXPECT_GT(room, 0u);
  std::ifstream in("/proc/meminfo");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_LE(room, mem_available_of(text) + (256ull << 20)) << "MemAvailable moves a little between the reads";
}

}  // namespace
}  // namespace hydro
