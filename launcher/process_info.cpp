#include "process_info.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <fstream>
#include <sstream>
#include <vector>

namespace hydro::launcher {

bool parse_proc_stat(const std::string& content, ProcStat* out) {
  size_t open = content.find('(');
  size_t close = content.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  ProcStat s;
  try {
    s.pid = static_cast<pid_t>(std::stol(content.substr(0, open)));
  } catch (...) {
    return false;
  }
  std::istringstream rest(content.substr(close + 1));
  std::vector<std::string> f;  // f[0] is field 3
  for (std::string tok; rest >> tok && f.size() < 20;) f.push_back(tok);
  if (f.size() < 20 || f[0].size() != 1) return false;
  try {
    s.state = f[0][0];
    s.ppid = static_cast<pid_t>(std::stol(f[1]));
    s.pgid = static_cast<pid_t>(std::stol(f[2]));
    s.sid = static_cast<pid_t>(std::stol(f[3]));
    s.start_time = std::stoull(f[19]);
  } catch (...) {
    return false;
  }
  *out = s;
  return true;
}

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  ProcStat s;
  if (!parse_proc_stat(ss.str(), &s)) return std::nullopt;
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

// The fields session_workers needs from /proc/PID/stat, read with one read(2) into a buffer: it
// runs for each process on the node at each signal forwarded, where streams cost several times more.
bool read_stat_fast(const char* pid, ProcStat* out) {
  char path[300], buf[512];
  std::snprintf(path, sizeof path, "/proc/%s/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  if (!close || close[1] != ' ' || !close[2]) return false;
  out->pid = static_cast<pid_t>(std::atol(buf));
  out->state = close[2];
  char* end = nullptr;
  out->ppid = static_cast<pid_t>(std::strtol(close + 3, &end, 10));
  out->pgid = static_cast<pid_t>(std::strtol(end, &end, 10));
  out->sid = static_cast<pid_t>(std::strtol(end, &end, 10));
  return true;
}

}  // namespace

std::vector<pid_t> session_workers(pid_t child) {
  std::multimap<pid_t, ProcStat> by_parent;
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(proc)) {
      ProcStat s;
      if (e->d_name[0] >= '1' && e->d_name[0] <= '9' && read_stat_fast(e->d_name, &s)) by_parent.emplace(s.ppid, s);
    }
    ::closedir(proc);
  }
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
