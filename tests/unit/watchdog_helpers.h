// Helpers of the watchdog tests (watchdog_server_test.cpp, watchdog_launch_test.cpp).
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "hydro/timer_table.h"
#include "process_info.h"

namespace hydro::test {

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Gone, or a zombie nobody has reaped yet (an orphan's new parent may never reap it here).
inline bool dead(pid_t pid) {
  auto s = launcher::read_proc_stat(pid);
  return !s || s->state == 'Z' || s->state == 'X';
}

inline pid_t start_sleeper(bool own_group) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (own_group) ::setpgid(0, 0);
    ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (own_group) ::setpgid(pid, pid);  // no race with the kill below
  return pid;
}

inline std::string request(pid_t pid, const std::string& scope, double expiration, int signal = SIGKILL) {
  TimerRequest r;
  r.pid = pid;
  r.scope_id = scope;
  r.expiration_time = expiration;
  r.signal = signal;
  return format_timer_request(r);
}

}  // namespace hydro::test
