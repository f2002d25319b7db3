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
// What a cgroup's limit (memory.max; v1: memory.limit_in_bytes) leaves over its use
// (memory.current; v1: memory.usage_in_bytes), in bytes; UINT64_MAX for "max" or text that is no
// number (no limit known).
uint64_t cgroup_room_of(const std::string& limit, const std::string& usage);
// The memory cgroup of /proc/self/cgroup's text: v1's memory controller line ("4:memory:/x" gives
// "/x", and *v1 is set) where there is one, else the v2 line ("0::/x"); empty with neither.
std::string memory_cgroup_of(const std::string& proc_self_cgroup, bool* v1);
// The least of MemAvailable and the room of every memory cgroup from the process's up to the root
// (a limit set at the job's level binds its steps too), read from /proc and /sys/fs/cgroup.
uint64_t host_memory_available();

}  // namespace hydro
