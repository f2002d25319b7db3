#include "process_info.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
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

std::vector<pid_t> session_workers(pid_t child) {
  std::multimap<pid_t, ProcStat> by_parent;
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || *end) continue;
      if (auto s = read_proc_stat(static_cast<pid_t>(pid))) by_parent.emplace(s->ppid, *s);
    }
    ::closedir(proc);
  }
  std::vector<pid_t> workers, todo{child};
  for (size_t i = 0; i < todo.size() && i < 1 << 16; ++i) {
    auto [from, to] = by_parent.equal_range(todo[i]);
    for (auto it = from; it != to; ++it) {
      todo.push_back(it->second.pid);
      if (it->second.sid == it->second.pid && it->second.state != 'Z') workers.push_back(it->second.pid);
    }
  }
  return workers;
}

}  // namespace hydro::launcher
