// hydro-launch --restarts: after a generation of the program ended, whether to start the next one
// in this allocation, alone (one task) or with every task of the step (a RestartGroup).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "restart_group.h"
#include "supervisor.h"

namespace hydro::launcher {

// How one generation of the program ended.
struct RunEnd {
  int wait_status = 0;
  bool terminating = false;  // Slurm sent SIGTERM
  std::string hang;          // the watchdog killed it
  int64_t resumed_step = -1;
  bool exit_asked = false;  // hydro-launch asked it to checkpoint and exit (decide_restart)
};

// The step's tasks, read from the environment once: how many, and, with --restarts and several
// tasks, their restart group (null, with the reason logged, when there is none to open: then a
// failure is requeued as before).
struct StepTasks {
  int world_size = 1;
  std::unique_ptr<RestartGroup> group;
};
StepTasks open_step_tasks(const Options& o);

// After generation `done` ended: true to start generation done + 1. With a group, follows a call
// another task made, or calls it for this task's failure, then waits for every task's program to
// have ended. A task whose program ended well stays in the group until every task's has (at most
// 120 s), and follows a call made meanwhile.
bool next_generation(const Options& o, const RunEnd& end, int done, const StepTasks& tasks);

}  // namespace hydro::launcher
