// hydro-launch's process supervision: start the training program, forward Slurm's signals to it,
// and turn its "checkpointed, requeue me" exit status into a requeue of the job.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hydro/signal_map.h"

namespace hydro::launcher {

struct Options {
  std::string checkpoint_dir;  // --checkpoint-dir, else $HYDRO_CKPT_DIR; empty = none
  int requeue_signal = 0;      // --requeue-signal: checkpoint, exit, requeue the job (0 = none)
  std::string scontrol = "scontrol";
  std::string watchdog_file;  // --watchdog-file: the timer FIFO (absolute); empty = no watchdog
  double watchdog_kill_after =
      30;                     // --watchdog-kill-after: seconds from a catchable expiry signal to SIGKILL; 0 = never
  int time_limit_margin = 0;  // --time-limit-margin, $HYDRO_TIME_LIMIT_MARGIN: seconds; 0 = no watch
  int max_restarts = 3;       // --max-restarts, $HYDRO_MAX_RESTARTS: hydro-launch's own requeues (SLURM_RESTART_COUNT)
  int restarts = 0;           // --restarts, $HYDRO_RESTARTS: starts again in this allocation before a requeue
  SignalMap signals = SignalMap::defaults();  // $HYDRO_SIGNALS: forwarded, and whose checkpoint_exit asks
  std::vector<std::string> command;
};

// What to do once the child has exited with `status` (a wait status).
struct ExitDecision {
  int exit_code;
  bool requeue;  // run `scontrol requeue $SLURM_JOB_ID`
  std::string why;
  int restarts = 0;  // decide_after_run: SLURM_RESTART_COUNT as it counted it (0 when unset or bad)
};
// `terminating`: Slurm sent SIGTERM (requeue, scancel, time limit, preemption): Slurm decides.
// `in_slurm_job`: SLURM_JOB_ID is set.
ExitDecision decide_exit(int wait_status, bool terminating, bool in_slurm_job);
// The program was killed because a watchdog timer expired (`hang` says whose, e.g.
// "pid 12 scope 'step'"). Requeue while the job's `restart_count` (SLURM_RESTART_COUNT) is below
// `max_restarts`; beyond it exit kExitWatchdog without a requeue.
ExitDecision decide_watchdog_exit(const std::string& hang, bool terminating, bool in_slurm_job, int restart_count,
                                  int max_restarts);
// The whole exit policy once the program has ended with `wait_status`: the above, with the job's
// SLURM_RESTART_COUNT against --max-restarts, a preemption in progress (requeued now), and only
// task 0's hydro-launch running the requeue.
ExitDecision decide_after_run(const Options& o, int wait_status, bool terminating, const std::string& hang);
// In-job restart (--restarts N): whether to start the program again in this allocation after a
// run that ended with `wait_status` (or a watchdog `hang`). `restarts_done`: this hydro-launch's
// restarts so far; `resumed_step` and `newest_step`: the checkpoint the run resumed from and the
// newest one now (-1: none). A run that failed again without a newer checkpoint than the one it
// resumed from would redo the same steps: that falls back to the requeue. So do the last restart,
// a clean exit, a requeue the program asks for, Slurm ending the job, and several tasks that
// cannot restart `together` (no restart group: generations.h).
struct RestartDecision {
  bool restart = false;
  std::string why;  // empty when there was nothing to restart (a clean end)
};
// `newest_step` is asked only when the answer turns on it (it verifies the newest checkpoint).
// `exit_asked`: hydro-launch had asked this run to checkpoint and exit (the time limit's margin, the
// requeue signal); a failure then is requeued, not restarted in an allocation that is ending.
RestartDecision decide_restart(const Options& o, int wait_status, bool terminating, const std::string& hang,
                               int restarts_done, int64_t resumed_step, const std::function<int64_t()>& newest_step,
                               int world_size, bool together = false, bool exit_asked = false);

// SLURM_RESTART_COUNT's value (null or empty = 0) -> restarts; -1 when it is not a number.
int parse_restart_count(const char* value);

// Runs the command to completion. Returns hydro-launch's exit code.
int run(const Options& options);

}  // namespace hydro::launcher
