#include "hydro/host_memory.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "hydro/durable_fs.h"

namespace hydro {

namespace {

constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

// A whole /proc or /sys file, read to its end (their size shows as 0); empty, with *error set
// where given, when it cannot be read.
std::string read_text(const std::string& path, std::string* error = nullptr) {
  std::string text;
  Status s = posix_fs().read_file(path, &text);
  if (!s.ok() && error) *error = s.message();
  return text;
}

// The number after `key` (then spaces) at a line's start in `text`, and whether one was there:
// no locale or stream state involved (the process's global locale is the host program's).
bool number_after(const std::string& text, const std::string& key, uint64_t* out) {
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    if (text.compare(at, key.size(), key) == 0) {
      size_t digit = text.find_first_not_of(' ', at + key.size());
      if (digit == std::string::npos || digit >= end || !std::isdigit(static_cast<unsigned char>(text[digit])))
        return false;
      *out = std::strtoull(text.c_str() + digit, nullptr, 10);
      return true;
    }
    at = end + 1;
  }
  return false;
}

std::string trimmed(const std::string& text) { return text.substr(0, text.find_last_not_of(" \n") + 1); }

bool parse_bytes(const std::string& text, uint64_t* out) {
  size_t used = 0;
  try {
    *out = std::stoull(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return text.find_first_not_of(" \n", used) == std::string::npos;
}

}  // namespace

uint64_t mem_available_of(const std::string& meminfo) {
  uint64_t kib = 0;
  return number_after(meminfo, "MemAvailable:", &kib) ? kib * 1024 : 0;
}

uint64_t inactive_file_of(const std::string& memory_stat) {
  uint64_t value = 0;
  if (number_after(memory_stat, "total_inactive_file ", &value)) return value;  // v1's, counting the cgroups below
  return number_after(memory_stat, "inactive_file ", &value) ? value : 0;
}

uint64_t cgroup_room_of(const std::string& limit, const std::string& usage, const std::string& memory_stat) {
  uint64_t max = 0, used = 0;
  if (!parse_bytes(limit, &max) || !parse_bytes(usage, &used)) return kNoLimit;
  used -= std::min(used, inactive_file_of(memory_stat));
  return max > used ? max - used : 0;
}

std::string memory_cgroup_of(const std::string& proc_self_cgroup, bool* v1) {
  std::istringstream lines(proc_self_cgroup);
  std::string v2;
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find(",memory,") != std::string::npos) {
      *v1 = true;
      return line.substr(b + 1);
    }
    if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
  }
  *v1 = false;
  return v2;
}

HostRoom host_memory_available(const std::string& fs_root) {
  std::string error;
  const std::string meminfo = read_text(fs_root + "/proc/meminfo", &error);
  HostRoom room{mem_available_of(meminfo), "MemAvailable in /proc/meminfo"};
  if (room.bytes == 0)
    room.bound_by = "no MemAvailable in /proc/meminfo (" +
                    (error.empty() ? std::to_string(meminfo.size()) + " bytes read" : "read failed: " + error) + ")";
  bool v1 = false;
  std::string path = memory_cgroup_of(read_text(fs_root + "/proc/self/cgroup"), &v1);
  if (path.empty()) return room;
  const std::string root = fs_root + (v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup");
  const char* limit = v1 ? "/memory.limit_in_bytes" : "/memory.max";
  const char* usage = v1 ? "/memory.usage_in_bytes" : "/memory.current";
  for (;;) {
    const std::string dir = root + (path == "/" ? std::string() : path);
    const std::string max = read_text(dir + limit), current = read_text(dir + usage);
    const std::string stat = read_text(dir + "/memory.stat");
    const uint64_t left = cgroup_room_of(max, current, stat);
    if (left < room.bytes)
      room = {left, dir + limit + " (" + trimmed(max) + ") less " + (usage + 1) + " (" + trimmed(current) +
                        ") with its inactive_file (" + std::to_string(inactive_file_of(stat)) + ")"};
    if (path == "/" || path.empty()) return room;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}

}  // namespace hydro
