// The host memory a process may still take before the kernel's OOM killer acts on it: the system's
// MemAvailable and what each memory cgroup limit above the process leaves (Slurm's task/cgroup:
// cgroup v2's memory.max, or v1's memory.limit_in_bytes). A full GPU release (hydro/gpu_release.h) moves the device
// state there only if it fits.
#pragma once

#include <cstdint>
#include <string>

namespace hydro {

// MemAvailable from /proc/meminfo's text, in bytes; 0 when the line is missing.
uint64_t mem_available_of(const std::string& meminfo);
// The inactive page cache in a cgroup's memory.stat (v1: total_inactive_file, else inactive_file):
// the pages the kernel reclaims first, before it calls the OOM killer; 0 when not listed.
uint64_t inactive_file_of(const std::string& memory_stat);
// What a cgroup's limit (memory.max; v1: memory.limit_in_bytes) leaves over its use
// (memory.current; v1: memory.usage_in_bytes) less its inactive page cache (as the kubelet's
// working set: a job that read its data set through the cache is not full), in bytes; UINT64_MAX
// for "max" or text that is no number (no limit known).
uint64_t cgroup_room_of(const std::string& limit, const std::string& usage, const std::string& memory_stat = "");
// The memory cgroup of /proc/self/cgroup's text: v1's memory controller line ("4:memory:/x" gives
// "/x", and *v1 is set) where there is one, else the v2 line ("0::/x"); empty with neither.
std::string memory_cgroup_of(const std::string& proc_self_cgroup, bool* v1);
// Host memory the process may still take, and what bounds it: "MemAvailable in /proc/meminfo", or
// the cgroup files whose limit leaves the least (with their values), for the log.
struct HostRoom {
  uint64_t bytes = 0;
  std::string bound_by;
};
// The least of MemAvailable and the room of every memory cgroup from the process's up to the root
// (a limit set at the job's level binds its steps too), read from /proc and /sys/fs/cgroup (below
// `fs_root`, for a test).
HostRoom host_memory_available(const std::string& fs_root = "");

}  // namespace hydro
