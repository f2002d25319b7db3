#include "generations.h"

#include <sys/wait.h>

#include "say.h"
#include "resume.h"

namespace hydro::launcher {
namespace {

// How long a task waits for its peers in the restart group: to connect, and for every task's
// program to have ended. Only a peer whose hydro-launch is gone makes a task wait this long.
constexpr std::chrono::seconds kGroupTimeout{120};

// The program exited 0 on its own: no SIGTERM from Slurm, no kill by the watchdog.
bool ended_well(const RunEnd& end) {
  return !end.terminating && end.hang.empty() && WIFEXITED(end.wait_status) && WEXITSTATUS(end.wait_status) == 0;
}

void say_called_after_ending(int next, const std::string& call) {
  say("generation " + std::to_string(next) + " was called after this task's program ended well (" + call +
      "): starting it again with every task's");
}

// Calls generation `next` for this task's failure, or follows the call another task made first
// (which may have come just after this task's program ended well: it is said so).
bool call_or_follow(const Options& o, const RunEnd& end, int done, RestartGroup* group, int world_size) {
  const int next = done + 1;
  std::string standing;
  if (group && group->called(next, &standing)) {
    if (ended_well(end))
      say_called_after_ending(next, standing);
    else
      say("generation " + std::to_string(next) + " was called (" + standing + "): starting this task's program again");
    return true;
  }
  RestartDecision r = decide_restart(
      o, end.wait_status, end.terminating, end.hang, done, end.resumed_step, [&o] { return newest_step(o); },
      world_size, group != nullptr, end.exit_asked);
  if (!r.why.empty()) say(r.why);
  if (!r.restart || !group) return r.restart;
  Status st = group->call(next, r.why, &standing);
  if (!st.ok()) {
    say("error: the restart group: " + st.message() + "; not restarting in this allocation");
    return false;
  }
  say("generation " + std::to_string(next) + " called (" + standing + "): every task's program starts again");
  return true;
}

// This task's program ended well: stays in the group until every task's has, so that a peer whose
// program fails at the end (a crash in teardown, say) can still restart them all together. true
// when a peer called the next generation meanwhile.
bool called_while_ending(const RunEnd& end, int done, RestartGroup* group) {
  if (!group || !ended_well(end)) return false;
  const int next = done + 1;
  std::string call;
  switch (group->finish(next, kGroupTimeout, &call)) {
    case RestartGroup::Finish::called: say_called_after_ending(next, call); return true;
    case RestartGroup::Finish::timed_out:
      say("warning: not every task's program had ended within " + std::to_string(kGroupTimeout.count()) +
          " s of this one's; a failure of theirs now requeues the job");
      return false;
    case RestartGroup::Finish::all_ended:
    case RestartGroup::Finish::store_gone: return false;
  }
  return false;
}

}  // namespace

StepTasks open_step_tasks(const Options& o) {
  StepTasks tasks;
  DistEnv env;
  if (!DistEnv::from_env(&env).ok()) return tasks;
  tasks.world_size = env.world_size;
  if (o.restarts == 0 || env.world_size == 1) return tasks;
  Status st = RestartGroup::open(env, kGroupTimeout, &tasks.group);
  if (!st.ok()) {
    say("warning: --restarts: " + st.message() + "; a failure will requeue the job instead");
    return tasks;  // open() leaves the group null when it fails
  }
  tasks.group->watch(1);
  return tasks;
}

bool next_generation(const Options& o, const RunEnd& end, int done, const StepTasks& tasks) {
  RestartGroup* group = tasks.group.get();
  if (!call_or_follow(o, end, done, group, tasks.world_size) && !called_while_ending(end, done, group)) return false;
  if (!group) return true;
  Status st = group->arrive(done + 1, kGroupTimeout);
  if (!st.ok()) {
    say("error: the restart group: " + st.message() + "; not restarting in this allocation");
    return false;
  }
  say("every task's program of generation " + std::to_string(done) + " has ended: starting generation " +
      std::to_string(done + 1));
  group->watch(done + 2);
  return true;
}

}  // namespace hydro::launcher
