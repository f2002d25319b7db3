// The decisions at each step's end: a pause, the suspend checkpoint, a checkpoint every N steps
// or on request, the ranks' vote, and the checkpoint before an exit for a requeue.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <stdexcept>

#include "hydro/checkpoint_group.h"
#include "hydro/exit_codes.h"
#include "hydro/launch_ready.h"
#include "hydro/hang_watch.h"
#include "hydro/log.h"
#include "hydro/pause_gate.h"
#include "hydro/watchdog_client.h"
#include "hydro/runtime.h"
#include "hydro/setting_schema.h"
#include "operator_heartbeat.h"
#include "operator_pause.h"
#include "process_gpu.h"
#include "raise.h"

namespace hydro {

// Why a SIGTSTP now would not end the step and checkpoint first ("" where it would, or where
// HYDRO_SUSPEND_CHECKPOINT or the pause is off: nothing to say).
std::string Runtime::suspend_checkpoint_why_not() const {
  if (!settings_.suspend_checkpoint || !settings_.pause) return "";
  if (settings_.mode == CheckpointMode::async) return "HYDRO_CKPT_MODE=async";
  if (settings_.checkpoint_dir.empty()) return "no checkpoint directory";
  if (last_step_s_ < 0 || last_save_s_ < 0) return "no step and checkpoint timed yet";
  const double took = last_step_s_ + last_save_s_, budget = settings_.suspend_checkpoint_budget_s();
  if (took < budget) return "";
  char text[160];
  std::snprintf(text, sizeof text,
                "the last step and checkpoint took %.2f s, more than 3/4 of the suspend grace time (%.2f s)", took,
                budget);
  return text;
}

// Whether this rank's SIGTSTP would end the step and checkpoint first, given why_not()'s answer.
bool Runtime::suspend_checkpoint_fits(const std::string& why_not) const {
  return settings_.suspend_checkpoint && settings_.pause && why_not.empty();
}

void Runtime::update_suspend_budget() {
  // One rank decides alone. A group decides at each step-end vote, every rank alike. Several ranks
  // whose state rank 0 writes alone never do it: rank 0 would wait in a collective for a paused peer.
  if (settings_.world_size != 1) return;
  const std::string why_not = suspend_checkpoint_why_not();
  set_suspend_checkpoint(suspend_checkpoint_fits(why_not), why_not);
}

// One step end's decisions: from this rank's signals, then (in a group) from the vote.
struct Runtime::StepEndPlan {
  bool pending = false;         // a pause is pending
  bool suspend_now = false;     // a SIGTSTP whose checkpoint fits before the freeze: save, then pause
  bool saved = false;           // one rank's suspend checkpoint is written already
  bool checkpoint = false;      // checkpoint at this step (every N steps, requested, or voted)
  bool requested = false;       // by `hydroctl checkpoint`
  bool exit = false;            // checkpoint, then exit for a requeue
  bool before_suspend = false;  // this step's checkpoint is the suspend's
};

bool Runtime::step_end(int64_t step) {
  time_last_step();
  gpu_prepare_at_step_end();
  // A step ended: progress for the hang watch, now and once its checkpoint is done.
  struct StampOnReturn {
    std::chrono::steady_clock::time_point* t;
    HangWatch* watch;
    ~StampOnReturn() {
      *t = std::chrono::steady_clock::now();
      if (watch) watch->progress();
    }
  } stamp{&last_step_end_, hang_watch_.get()};
  if (hang_watch_) hang_watch_->progress();
  StepEndPlan plan = suspend_at_step_end(step);
  decide_checkpoint(step, &plan);
  if (plan.exit) {
    exit_checkpoint(step);
    tell_launcher_exiting();  // for a launcher in between (torchrun) that ends with its own status
    for (int signo : {SIGTERM, settings_.signals.signal_for(Action::checkpoint_exit)})
      SignalBridge::ignore_from_now_on(signo);
    return false;
  }
  if (plan.checkpoint && !plan.saved) checkpoint_at(step, plan);
  // A group's suspend checkpoint: every rank with its SIGTSTP by now (also one that came during the
  // vote or the save) pauses here, at the same step. One whose SIGTSTP comes later still (the
  // signals reach the ranks within a millisecond; the vote and save take longer) runs on into the
  // next step's collective and waits there, for its peer, until the freeze.
  if (plan.before_suspend && grouped() && PauseGate::instance().pause_pending()) pause_at_end_of(step);
  return true;
}

void Runtime::time_last_step() {
  const auto now = std::chrono::steady_clock::now();
  if (last_step_end_ == std::chrono::steady_clock::time_point{}) return;
  last_step_s_ = std::chrono::duration<double>(now - last_step_end_).count();
  update_suspend_budget();
}

void Runtime::pause_at_end_of(int64_t step) {
  const std::string drained = drain_for_pause();
  PauseGate::instance().wait_while_paused(
      [step, &drained] { log("paused at the end of step " + std::to_string(step) + drained); });
  gpu_restore_at_resume();
  log("resumed at the end of step " + std::to_string(step));
}

// SIGTSTP with a checkpoint that fits before the freeze: the step has ended; checkpoint, then
// pause. A group checkpoints together, through the vote, then every rank that has its SIGTSTP
// pauses after the save. One reading of the pause serves both decisions: a SIGTSTP landing between
// two readings would pause a group's rank before the vote and lose the suspend checkpoint.
Runtime::StepEndPlan Runtime::suspend_at_step_end(int64_t step) {
  PauseGate& gate = PauseGate::instance();
  StepEndPlan plan;
  plan.pending = gate.pause_pending();
  plan.suspend_now = plan.pending && gate.pause_signal() == SIGTSTP && suspend_checkpoint_enabled() &&
                     !operator_pause_armed() && !gate.exit_requested();
  plan.before_suspend = plan.suspend_now;
  if (plan.suspend_now && !grouped()) {
    std::string path = save_tolerated(step);
    plan.saved = true;
    if (!path.empty())
      log("checkpoint of step " + std::to_string(step) + " committed in " + path + " before the suspend");
  }
  if (plan.pending && !(plan.suspend_now && grouped())) pause_at_end_of(step);
  return plan;
}

// Every N steps, on request, and (several ranks) as the vote grants.
void Runtime::decide_checkpoint(int64_t step, StepEndPlan* plan) {
  PauseGate& gate = PauseGate::instance();
  plan->checkpoint = settings_.checkpoint_every > 0 && step % settings_.checkpoint_every == 0;
  if (gate.take_checkpoint_request()) {
    if (settings_.checkpoint_dir.empty())
      log("checkpoint requested, but HYDRO_CKPT_DIR is not set: no checkpoint");
    else
      plan->checkpoint = plan->requested = true;
  }
  plan->exit = gate.exit_requested();
  if (!grouped()) return;
  GroupDecision d;
  const std::string mine = suspend_checkpoint_why_not();
  Status st = group_->vote(settings_.mode, plan->checkpoint, plan->exit, &d,
                           {suspend_checkpoint_fits(mine), plan->suspend_now});
  if (!st.ok()) throw_status(st);
  if (d.exit && !plan->exit) log("exit requested by another rank at step " + std::to_string(step));
  plan->checkpoint = d.checkpoint;
  plan->exit = d.exit;
  plan->before_suspend = d.suspend_now;
  set_suspend_checkpoint(d.suspend_checkpoint,
                         d.suspend_checkpoint || !mine.empty()
                             ? mine
                             : "another rank's last step and checkpoint take more than 3/4 of the suspend grace time");
}

// The checkpoint before an exit for a requeue, written here, before the process exits.
void Runtime::exit_checkpoint(int64_t step) {
  SignalBridge::drain();  // what asked for the exit ("requested by SIGTERM") is logged first
  if (settings_.checkpoint_dir.empty()) {
    log("WARNING: exit requested at step " + std::to_string(step) +
        ", but there is no checkpoint directory "
        "(HYDRO_CKPT_DIR, --hydro-checkpoint-dir): NOTHING IS SAVED, and a requeued job starts again from step 0");
    return;
  }
  if (!writes_checkpoints()) {
    log("exit requested at step " + std::to_string(step) + "; rank 0 writes the checkpoint");
    return;
  }
  try {  // an async write in flight finishes first
    wait_idle();
  } catch (const std::exception& e) {
    log(std::string("warning: ") + e.what() + "; writing the exit checkpoint anyway");
  }
  std::string path;
  if (settings_.mode == CheckpointMode::async) {
    path = save_async(step, false);
    wait_idle();
  } else {
    path = save(step);
  }
  log("checkpoint of step " + std::to_string(step) + " committed in " + path + "; exiting with status " +
      std::to_string(kExitRequeue) + " (requeue)");
}

// How many checkpoints of step_end in a row may fail, at the least, before the step fails: a file
// system full for a moment must not end the job (the soak test), one that stays unwritable must not
// go unseen. HYDRO_CKPT_FAILURE_GRACE bounds the run of failures in time too.
constexpr int kCheckpointFailuresTolerated = 2;

// A checkpoint training can go on without (every N steps, requested, before a suspend). One that
// fails leaves the newest committed checkpoint in place: a warning, and the next is tried at its
// time. The step fails at a failure past kCheckpointFailuresTolerated in a row that also comes
// checkpoint_failure_grace_s or more after the run's first (a count alone would end a job that
// checkpoints every second on a disk full for 10 s). The exit's own checkpoint is not one of them.
// In async mode a write fails after save() returned, and is thrown by the next: only a write known
// to have committed (async_committed_) ends a run of failures. "" when it failed.
std::string Runtime::save_tolerated(int64_t step) {
  std::string path;
  try {
    path = save(step);
  } catch (const std::exception& e) {
    const auto now = std::chrono::steady_clock::now();
    if (failed_in_a_row_++ == 0) first_failure_ = now;
    const auto failing = std::chrono::duration_cast<std::chrono::seconds>(now - first_failure_).count();
    if (failed_in_a_row_ > kCheckpointFailuresTolerated && failing >= settings_.checkpoint_failure_grace_s) throw;
    log("WARNING: checkpoint of step " + std::to_string(step) + " failed (" + std::to_string(failed_in_a_row_) +
        " in a row, the first " + std::to_string(failing) + " s ago; the step fails at failure " +
        std::to_string(kCheckpointFailuresTolerated + 1) + " or later once " +
        std::to_string(settings_.checkpoint_failure_grace_s) + " s have passed since the first, " +
        env_name(Setting::checkpoint_failure_grace) + "): " + e.what() +
        "; training goes on, and a restart resumes from the newest committed checkpoint");
    return "";
  }
  if (settings_.mode != CheckpointMode::async || async_committed_.exchange(false)) failed_in_a_row_ = 0;
  return path;
}

void Runtime::checkpoint_at(int64_t step, const StepEndPlan& plan) {
  const std::string path = save_tolerated(step);
  if (path.empty()) return;
  if (plan.before_suspend)
    log("checkpoint of step " + std::to_string(step) + " committed in " + path + " before the suspend");
  else if (plan.requested)
    log("checkpoint of step " + std::to_string(step) + " committed in " + path + " (requested); training goes on");
}

namespace {

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// A hung rank ends as hydro-launch's watchdog ends one: a timer that has already run out, so that
// hydro-launch kills it and requeues or restarts the job. Without a watchdog FIFO, or if that
// does not end it, it exits kExitWatchdog.
[[noreturn]] void end_hung(double running_s, double held_s, std::chrono::milliseconds timeout) {
  log("hang: no step ended in " + secs(running_s) + " of running time (" + secs(held_s) +
      " held, not counted), and no operator ran in its second half, over the process groups' timeout of " +
      secs(std::chrono::duration<double>(timeout).count()) +
      " that hydro watches in torch's place: a rank is hung; ending this one");
  WatchdogClient watchdog;
  if (watchdog.enabled() && watchdog.arm("hydro hang watch", 0.001).ok())
    std::this_thread::sleep_for(std::chrono::seconds(60));
  std::_Exit(kExitWatchdog);
}

}  // namespace

void Runtime::watch_collectives(std::chrono::milliseconds timeout) {
  hang_watch_.reset();
  if (timeout.count() <= 0) return;
  if (!heartbeat_) heartbeat_ = std::make_unique<OperatorHeartbeat>();
  hang_watch_ = std::make_unique<HangWatch>(
      timeout, [timeout](double running_s, double held_s) { end_hung(running_s, held_s, timeout); },
      std::chrono::milliseconds(200), nullptr, heartbeat_.get());
  log("the process groups' timeout (" + secs(std::chrono::duration<double>(timeout).count()) +
      ") is watched by hydro in running time: a hold of any length is no hang");
}

}  // namespace hydro
