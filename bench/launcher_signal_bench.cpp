// What hydro-launch pays to reach the workers of a launcher inside the program (issue 35, torchrun):
// each signal it forwards walks /proc for the descendants that lead a session of their own
// (session_workers) before it signals them. Measured side by side in one run, against signalling
// the program's process alone, as hydro-launch did before: a child standing for torchrun, with 2
// grandchildren in sessions of their own standing for its workers, all asleep; signal 0 (no
// delivery: the cost is the walk and the kill calls). Prints the processes on the node, the cost of
// each per signal, and their ratio. A program whose own hydro runtime said up on the readiness pipe
// (the training process itself, not a launcher) is signalled alone, without the walk.
//   hydro-bench-launcher-signal [ROUNDS]   (default 2000)
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_usage.h"
#include "process_info.h"

namespace {

using Clock = std::chrono::steady_clock;

// A child that starts 2 workers in sessions of their own and sleeps; returns once they are up.
pid_t start_torchrun_like() {
  int ready[2];
  if (::pipe(ready) != 0) std::exit(1);
  const pid_t child = ::fork();
  if (child == 0) {
    for (int w = 0; w < 2; ++w) {
      if (::fork() == 0) {
        ::setsid();
        if (::write(ready[1], "w", 1) != 1) ::_exit(1);
        ::pause();
        ::_exit(0);
      }
    }
    ::pause();
    ::_exit(0);
  }
  char c;
  for (int w = 0; w < 2; ++w)
    if (::read(ready[0], &c, 1) != 1) std::exit(1);
  ::close(ready[0]);
  ::close(ready[1]);
  return child;
}

int processes_on_node() {
  int n = 0;
  DIR* d = ::opendir("/proc");
  while (const dirent* e = d ? ::readdir(d) : nullptr) n += e->d_name[0] >= '1' && e->d_name[0] <= '9';
  if (d) ::closedir(d);
  return n;
}

template <class F>
double micros_per_round(int rounds, F f) {
  const auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) f();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / rounds;
}

}  // namespace

int main(int argc, char** argv) {
  hydro_bench::exit_on_options(argc, argv, "usage: hydro-bench-launcher-signal [ROUNDS]   (default 2000)");
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (rounds < 1) {
    std::fprintf(stderr, "hydro-bench-launcher-signal: ROUNDS is a whole number above 0, not '%s'\n", argv[1]);
    return 2;
  }
  const pid_t child = start_torchrun_like();
  size_t found = 0;
  const double alone = micros_per_round(rounds, [&] { ::kill(child, 0); });
  const double walk = micros_per_round(rounds, [&] {
    ::kill(child, 0);
    const std::vector<pid_t> workers = hydro::launcher::session_workers(child);
    found = workers.size();
    for (pid_t w : workers) ::kill(w, 0);
  });
  std::printf("processes on the node: %d; workers found: %zu\n", processes_on_node(), found);
  std::printf("signal the program alone:            %8.1f us per signal\n", alone);
  std::printf("signal the program and its workers:  %8.1f us per signal (the /proc walk)\n", walk);
  std::printf("ratio (with workers / alone):        %8.1f\n", walk / alone);
  for (pid_t w : hydro::launcher::session_workers(child)) ::kill(w, SIGKILL);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return found == 2 ? 0 : 1;
}
