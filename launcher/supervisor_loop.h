// hydro-launch's loop over one run of the program (supervisor.h is its interface): supervisor.cpp
// serves the signals, the watchdog, the time limit and the restart group; program_exit.cpp what the
// program's hydro runtime says, and the checkpoint-and-exit asked of it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generations.h"
#include "runtime_pipe.h"
#include "supervisor.h"
#include "time_limit.h"
#include "watchdog.h"
#include "worker_reports.h"
#include "say.h"

namespace hydro::launcher {

// How long a checkpoint-and-exit request waits for the program's runtime to come up.
constexpr int kReadyWaitSeconds = 60;

// One run of the program: hydro-launch's signals, the program's readiness, the watchdog and the
// time limit, served by one poll loop until the program ends.
class Supervisor {
 public:
  explicit Supervisor(const Options& o) : o_(o), exit_signal_(o.signals.signal_for(Action::checkpoint_exit)) {
    // A map with no checkpoint_exit: SIGTERM still ends the program.
    if (!exit_signal_) exit_signal_ = SIGTERM;
  }
  ~Supervisor() { close_fds(); }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Takes the signals, prepares the resume and the watchdog, starts the program. 0 when it runs,
  // else hydro-launch's exit code.
  int start();
  // In-job restart: starts the program again after it ended, as generation `generation`, from the
  // newest checkpoint. 0 when it runs, else hydro-launch's exit code.
  int restart(int generation);
  // The event loop: returns once the program has ended (or was killed after a loop error).
  void run_until_exit();
  // Removes the watchdog's FIFO (if hydro-launch made it) and closes the loop's descriptors.
  void close_fds();

  // The restart group's calls (generations.h): the loop kills the program when one comes.
  void set_group(RestartGroup* group) { group_ = group; }
  int wait_status() const { return status_; }
  int64_t resumed_step() const { return resumed_step_; }
  bool terminating() const { return terminating_; }
  bool exit_asked() const { return exit_sent_ || exit_held_; }  // this run: checkpoint and exit, sent or held
  const std::string& hang() const { return hang_; }

 private:
  using Steady = std::chrono::steady_clock;
  int take_signals();
  int open_watchdog();
  int launch();  // the resume, the readiness pipe, the program
  int poll_timeout_ms() const;
  void on_runtime_pipe();
  RuntimePipe::State runtime_state() const;
  bool program_trains() const;
  void read_reports();
  void stop_launcher_once_workers_exit();
  void signal_program(int sig);
  void settle_workers_exit();
  void on_ready_deadline();
  bool on_signal();  // true once the program has ended
  void ask_exit(const std::string& why);
  void send_exit();
  void settle_teardown_race();
  void on_pause_or_resume(int sig);
  void kill_program(const std::string& why);
  void kill_tree();
  bool reap_children();  // true once the program has ended
  void end_orphans();
  std::vector<pid_t> programs_children() const;
  void on_group_call();

  const Options& o_;
  int exit_signal_;  // the map's checkpoint-and-exit signal
  sigset_t old_mask_{};
  int sfd_ = -1;           // signalfd of every signal hydro-launch handles
  RuntimePipe pipe_;       // what the program's runtime says: up, closed
  WorkerReports reports_;  // what its workers' runtimes say, when the pipe did not reach them
  pid_t child_ = -1;
  bool awaiting_ready_ = true;         // false once the program is ready, or can no longer say so
  bool exit_held_ = false;             // a checkpoint-and-exit waits for the program to be ready
  bool exit_sent_ = false;             // this run of the program was asked to checkpoint and exit
  bool launcher_stopped_ = false;      // its launcher (torchrun) got SIGTERM: its workers checkpointed to exit
  Steady::time_point ready_deadline_;  // a program without hydro's runtime is not waited for longer
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<TimeLimitWatch> time_limit_;
  RestartGroup* group_ = nullptr;
  std::vector<pid_t> not_the_programs_;  // hydro-launch's children before the program's start
  int held_pause_ = 0;                   // the last pause forwarded, until a resume: sent to each worker up later
  bool terminating_ = false;             // Slurm sent SIGTERM
  std::string hang_;                     // set when the watchdog killed a worker: the program's end is a hang
  int status_ = 0;                       // the program's wait status
  int64_t resumed_step_ = -1;            // the checkpoint the program was started from; -1: none
};

}  // namespace hydro::launcher
