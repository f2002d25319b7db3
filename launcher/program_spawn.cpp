#include "program_spawn.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "hydro/launch_ready.h"
#include "say.h"
#include "hydro/settings.h"

namespace hydro::launcher {

pid_t spawn(const std::vector<std::string>& command, const sigset_t& old_mask, const sigset_t& held, int ready_fd) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setpgid(0, 0);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  SignalMap::hold(held);
  struct stat st;
  if (ready_fd >= 0 && ::fstat(ready_fd, &st) == 0 && ::fcntl(ready_fd, F_SETFD, 0) == 0) {
    ::setenv(kLaunchReadyEnv, std::to_string(ready_fd).c_str(), 1);
    ::setenv(kLaunchReadyInoEnv, std::to_string(st.st_ino).c_str(), 1);
  }
  if (const char* job = std::getenv("SLURM_JOB_ID")) ::setenv(kLaunchJobEnv, job, 1);
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  say("error: cannot run " + command[0] + ": " + std::strerror(errno));
  ::_exit(127);
}

// The program's pause signals, to start it with blocked, unless it will not pause: by the runtime's
// own rule (Settings::pause_from_env), HYDRO_PAUSE unset is on. A pause that comes before the runtime is
// up then waits, pending, instead of ending the program (exit 138 for SIGUSR1). A program that
// uses these signals itself runs with HYDRO_PAUSE=off, or another HYDRO_SIGNALS map.
sigset_t held_signals(const SignalMap& map) {
  sigset_t none;
  sigemptyset(&none);
  bool pause = true;
  if (Settings::pause_from_env(&pause).ok() && !pause) return none;
  return map.blocked_until_handled();
}

}  // namespace hydro::launcher
