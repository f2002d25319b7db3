// A stand-in training process for the watchdog tests, run under hydro-launch --watchdog-file:
//   hydro_watchdog_worker hang DIR    arms a 1 s timer, starts `sleep 1000` in its own process group
//                                     (like a DataLoader worker), writes DIR/worker.pid and
//                                     DIR/sleeper.pid, then hangs
//   hydro_watchdog_worker disarm DIR  arms a 3 s timer, disarms it in time (ScopedTimer), outlives
//                                     the deadline, writes DIR/done and exits 0
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "hydro/watchdog_client.h"

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path + ".tmp");
  f << text;
  f.close();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s hang|disarm DIR\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  hydro::WatchdogClient watchdog;
  if (!watchdog.enabled()) {
    std::fprintf(stderr, "watchdog_worker: no HYDRO_WATCHDOG_FILE\n");
    return 3;
  }
  // The test's files are written before the 1 s timer is armed, and the disarmed step does nothing
  // inside its 3 s: on a loaded machine the timer must not run out first.
  if (mode == "hang") {
    pid_t sleeper = ::fork();
    if (sleeper == 0) {
      ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    write_file(dir + "/sleeper.pid", std::to_string(sleeper));
    write_file(dir + "/worker.pid", std::to_string(::getpid()));
    hydro::ScopedTimer timer(watchdog, "train step", 1);
    if (!timer.status().ok()) return 4;
    for (;;) ::pause();  // hung: the timer is never disarmed
  }
  if (mode == "disarm") {
    {
      hydro::ScopedTimer timer(watchdog, "train step", 3);
      if (!timer.status().ok()) return 4;
    }
    ::sleep(4);  // past the deadline
    write_file(dir + "/done", "done");
    return 0;
  }
  std::fprintf(stderr, "watchdog_worker: unknown mode %s\n", mode.c_str());
  return 2;
}
