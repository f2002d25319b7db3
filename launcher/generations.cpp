#include "generations.h"

#include "hydro/log.h"
#include "resume.h"

namespace hydro::launcher {
namespace {

void say(const std::string& m) { log_line("hydro-launch", m); }

// How long a task waits for its peers in the restart group: to connect, and for every task's
// program to have ended. Only a peer whose hydro-launch is gone makes a task wait this long.
constexpr std::chrono::seconds kGroupTimeout{120};

// Calls generation `next` for this task's failure, or follows the call another task made first.
bool call_or_follow(const Options& o, const RunEnd& end, int done, RestartGroup* group, int world_size) {
  const int next = done + 1;
  std::string standing;
  if (group && group->called(next, &standing)) {
    say("generation " + std::to_string(next) + " was called (" + standing + "): starting this task's program again");
    return true;
  }
  RestartDecision r = decide_restart(
      o, end.wait_status, end.terminating, end.hang, done, end.resumed_step, [&o] { return newest_step(o); },
      world_size, group != nullptr);
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

}  // namespace

std::unique_ptr<RestartGroup> open_restart_group(const Options& o) {
  DistEnv env;
  if (o.restarts == 0 || !DistEnv::from_env(&env).ok() || env.world_size == 1) return nullptr;
  std::unique_ptr<RestartGroup> group;
  Status st = RestartGroup::open(env, kGroupTimeout, &group);
  if (!st.ok()) {
    say("warning: --restarts: " + st.message() + "; a failure will requeue the job instead");
    return nullptr;
  }
  group->watch(1);
  return group;
}

bool next_generation(const Options& o, const RunEnd& end, int done, RestartGroup* group) {
  DistEnv env;
  const int world_size = DistEnv::from_env(&env).ok() ? env.world_size : 1;
  if (!call_or_follow(o, end, done, group, world_size)) return false;
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
