// What hydro-launch reads about a process from /proc: whose it is, and whether it is still the
// same process (a pid can be reused once its process is reaped).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hydro::launcher {

struct ProcStat {
  pid_t pid = 0;
  char state = '?';         // field 3: R, S, D, Z, ...
  pid_t ppid = 0;           // field 4
  pid_t pgid = 0;           // field 5
  pid_t sid = 0;            // field 6: the session
  uint64_t start_time = 0;  // field 22: clock ticks after boot; unique per pid at any time
};

// The content of /proc/PID/stat -> its fields. The command name (field 2) is in parentheses and
// may hold spaces and ')', so the fields are counted after the last ')'. False when malformed.
bool parse_proc_stat(const std::string& content, ProcStat* out);
// Reads /proc/PID/stat; nullopt when the process is gone.
std::optional<ProcStat> read_proc_stat(pid_t pid);

// Whether hydro-launch may signal `pid`: it is in the process group of `child` (the program
// hydro-launch started, a group leader) or a descendant of `child`.
bool in_tree(pid_t pid, pid_t child);

// The workers of a launcher inside the program: the descendants of `child` that lead a session of
// their own, as torchrun starts each of its workers (start_new_session), and not below one (a
// worker's own helpers are its own). The program's signals do
// not reach them through its process group, nor through its launcher, which forwards none of
// SIGUSR1 and SIGUSR2, and answers SIGTERM by killing them 30 s later.
std::vector<pid_t> session_workers(pid_t child);

// The processes whose parent is `parent` now, zombies included.
std::vector<pid_t> children_of(pid_t parent);

}  // namespace hydro::launcher
