#include "process_info.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

namespace hydro::launcher {

namespace {

// The number at the start of [p, end) (after blanks), as std::stoll reads one; false without one.
bool leading_number(const char* p, const char* end, long long* out) {
  std::string token(p, end);
  char* stop = nullptr;
  errno = 0;
  *out = std::strtoll(token.c_str(), &stop, 10);
  return stop != token.c_str() && errno == 0;
}

}  // namespace

bool parse_proc_stat(const std::string& content, ProcStat* out) {
  size_t open = content.find('(');
  size_t close = content.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  long long pid = 0;
  if (!leading_number(content.data(), content.data() + open, &pid)) return false;
  // The fields after the command's ')', as [start, end) of each; f[0] is field 3.
  std::pair<const char*, const char*> f[20];
  size_t n = 0;
  for (const char *p = content.data() + close + 1, *end = content.data() + content.size(); n < 20;) {
    while (p < end && std::isspace(static_cast<unsigned char>(*p))) ++p;
    if (p == end) break;
    const char* start = p;
    while (p < end && !std::isspace(static_cast<unsigned char>(*p))) ++p;
    f[n++] = {start, p};
  }
  if (n < 20 || f[0].second - f[0].first != 1) return false;
  long long ppid = 0, pgid = 0, sid = 0, start_time = 0;
  if (!leading_number(f[1].first, f[1].second, &ppid) || !leading_number(f[2].first, f[2].second, &pgid) ||
      !leading_number(f[3].first, f[3].second, &sid) || !leading_number(f[19].first, f[19].second, &start_time))
    return false;
  *out = {static_cast<pid_t>(pid),  *f[0].first,
          static_cast<pid_t>(ppid), static_cast<pid_t>(pgid),
          static_cast<pid_t>(sid),  static_cast<uint64_t>(start_time)};
  return true;
}

// One read(2) into a buffer: session_workers reads every process's on the node at each signal
// forwarded, where a stream costs several times more.
std::optional<ProcStat> read_proc_stat(pid_t pid) {
  char path[32], buf[1024];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  ProcStat s;
  if (n <= 0 || !parse_proc_stat(std::string(buf, static_cast<size_t>(n)), &s)) return std::nullopt;
  return s;
}

bool in_tree(pid_t pid, pid_t child) {
  auto s = read_proc_stat(pid);
  if (!s) return false;
  if (s->pgid == child) return true;
  // Walk up the parents; bounded, in case /proc changes under us.
  for (int depth = 0; s && depth < 4096; ++depth) {
    if (s->pid == child) return true;
    if (s->ppid <= 1) return false;
    s = read_proc_stat(s->ppid);
  }
  return false;
}

namespace {

// Every process on the node, by its parent's pid.
std::multimap<pid_t, ProcStat> processes_by_parent() {
  std::multimap<pid_t, ProcStat> by_parent;
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(proc)) {
      const long pid = e->d_name[0] >= '1' && e->d_name[0] <= '9' ? std::atol(e->d_name) : 0;
      if (auto s = pid > 0 ? read_proc_stat(static_cast<pid_t>(pid)) : std::nullopt) by_parent.emplace(s->ppid, *s);
    }
    ::closedir(proc);
  }
  return by_parent;
}

}  // namespace

std::vector<pid_t> children_of(pid_t parent) {
  const std::multimap<pid_t, ProcStat> by_parent = processes_by_parent();
  std::vector<pid_t> children;
  auto [from, to] = by_parent.equal_range(parent);
  for (auto it = from; it != to; ++it) children.push_back(it->second.pid);
  return children;
}

std::vector<pid_t> session_workers(pid_t child) {
  const std::multimap<pid_t, ProcStat> by_parent = processes_by_parent();
  std::vector<pid_t> workers, todo{child};
  for (size_t i = 0; i < todo.size() && i < 1 << 16; ++i) {
    auto [from, to] = by_parent.equal_range(todo[i]);
    for (auto it = from; it != to; ++it) {
      const bool leader = it->second.sid == it->second.pid;
      if (!leader) todo.push_back(it->second.pid);  // a worker's own descendants are its own
      if (leader && it->second.state != 'Z') workers.push_back(it->second.pid);
    }
  }
  return workers;
}

}  // namespace hydro::launcher
