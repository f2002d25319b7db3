#include <sys/wait.h>

#include <cstdlib>

#include "hydro/exit_codes.h"
#include "say.h"
#include "hydro/signal_map.h"
#include "preemption.h"
#include "supervisor.h"

namespace hydro::launcher {

namespace {

// How the run ended, for the log: "" when it ended cleanly or asked to be requeued.
std::string failure_of(int status, const std::string& hang) {
  if (!hang.empty()) return "the watchdog killed it (" + hang + " hung)";
  if (WIFSIGNALED(status)) return "the program was killed by " + signal_name(WTERMSIG(status));
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code == 0 || code == kExitRequeue) return "";
  return "the program exited with status " + std::to_string(code);
}

// `what` happened ("...; "): requeue the job while SLURM_RESTART_COUNT is below --max-restarts,
// else exit with `give_up_code` and say why.
ExitDecision requeue_within_max_restarts(const std::string& what, int give_up_code, int restart_count,
                                         int max_restarts) {
  if (restart_count >= max_restarts)
    return {give_up_code, false,
            what + "not requeueing: the job has been restarted " + std::to_string(restart_count) +
                " times (SLURM_RESTART_COUNT) and --max-restarts is " + std::to_string(max_restarts)};
  return {kExitRequeue, true,
          what + "requeueing the job (restart " + std::to_string(restart_count + 1) + " of --max-restarts " +
              std::to_string(max_restarts) + ")"};
}

// With --restarts, a program that failed and was not (or no longer) restarted in place is requeued
// like a hung one.
ExitDecision decide_failure_exit(const std::string& failure, int wait_status, int restart_count, int max_restarts) {
  int code = WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
  return requeue_within_max_restarts(failure + "; ", code, restart_count, max_restarts);
}

}  // namespace

ExitDecision decide_exit(int status, bool terminating, bool in_slurm_job) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return {128 + sig, false, "the program was killed by " + signal_name(sig)};
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (code != kExitRequeue) return {code, false, "the program exited with status " + std::to_string(code)};
  if (terminating)
    return {code, false, "the program checkpointed after SIGTERM; Slurm is ending the job and requeues it if asked to"};
  if (!in_slurm_job) return {code, false, "the program checkpointed and asks to be run again (not in a Slurm job)"};
  return {code, true, "the program checkpointed and asks to be run again: requeueing the job"};
}

ExitDecision decide_watchdog_exit(const std::string& hang, bool terminating, bool in_slurm_job, int restart_count,
                                  int max_restarts) {
  const std::string what = "watchdog expired: " + hang + " hung and was killed; ";
  if (terminating)
    return {kExitWatchdog, false, what + "Slurm is ending the job (SIGTERM) and requeues it if asked to"};
  if (!in_slurm_job)
    return {kExitRequeue, false,
            what + "not in a Slurm job, so nothing to requeue (exit status " + std::to_string(kExitRequeue) +
                " asks to be run again)"};
  return requeue_within_max_restarts(what, kExitWatchdog, restart_count, max_restarts);
}

RestartDecision decide_restart(const Options& o, int wait_status, bool terminating, const std::string& hang,
                               int restarts_done, int64_t resumed_step, const std::function<int64_t()>& newest_step,
                               int world_size, bool together, bool exit_asked) {
  RestartDecision d;
  const std::string failure = failure_of(wait_status, hang);
  if (failure.empty() || terminating || o.restarts == 0) return d;
  d.why = failure + "; ";
  if (exit_asked) {
    d.why +=
        "not restarting it in this allocation: hydro-launch had asked it to checkpoint and exit (the time "
        "limit's margin or the requeue signal), so the job is requeued and resumes from its newest checkpoint";
  } else if (world_size > 1 && !together) {
    d.why += "not restarting it in this allocation: the step's " + std::to_string(world_size) +
             " tasks have no restart group to restart together (see the warning at hydro-launch's start)";
  } else if (restarts_done >= o.restarts) {
    d.why += "not restarting it again: --restarts " + std::to_string(o.restarts) + " used up";
  } else if (restarts_done > 0 && newest_step() <= resumed_step) {
    d.why += "not restarting it again: it failed again before any checkpoint past " +
             (resumed_step < 0 ? std::string("its start") : "step " + std::to_string(resumed_step)) +
             ", so a restart here would redo the same steps";
  } else {
    d.restart = true;
    d.why += "restart " + std::to_string(restarts_done + 1) + " of --restarts " + std::to_string(o.restarts) +
             " (generation " + std::to_string(restarts_done + 1) +
             "): starting it again in this allocation from its newest checkpoint";
  }
  return d;
}

int parse_restart_count(const char* value) {
  if (!value || !*value) return 0;
  long n = 0;
  for (const char* p = value; *p; ++p) {
    if (*p < '0' || *p > '9' || n > 1000000) return -1;
    n = n * 10 + (*p - '0');
  }
  return static_cast<int>(n);
}

ExitDecision decide_after_run(const Options& o, int wait_status, bool terminating, const std::string& hang) {
  const char* job_id = std::getenv("SLURM_JOB_ID");
  const bool in_job = job_id && *job_id;
  const char* restarts_env = std::getenv("SLURM_RESTART_COUNT");
  int restarts = parse_restart_count(restarts_env);
  if (restarts < 0) {
    say(std::string("warning: SLURM_RESTART_COUNT='") + restarts_env + "' is not a number; counting 0 restarts");
    restarts = 0;
  }
  ExitDecision d;
  const std::string failure = failure_of(wait_status, hang);
  // A hang or a failure is this task's alone: its peers only see their collectives fail.
  bool only_here = true;
  if (!hang.empty()) {
    d = decide_watchdog_exit(hang, terminating, in_job, restarts, o.max_restarts);
  } else if (o.restarts > 0 && !failure.empty() && !terminating && in_job) {
    d = decide_failure_exit(failure, wait_status, restarts, o.max_restarts);
  } else {
    only_here = false;
    d = decide_exit(wait_status, terminating, in_job);
    if (d.requeue && restarts >= o.max_restarts) {
      d.requeue = false;
      d.why = "the program checkpointed and asks to be run again, but not requeueing: the job has been restarted " +
              std::to_string(restarts) + " times (SLURM_RESTART_COUNT) and --max-restarts is " +
              std::to_string(o.max_restarts);
    }
    if (terminating && !d.requeue && d.exit_code == kExitRequeue && in_job) {
      std::string when = job_preempt_time(o.scontrol, job_id);
      if (!when.empty()) {
        d.requeue = true;
        d.why = "the program checkpointed; the job is being preempted (PreemptTime=" + when +
                "): requeueing it now, so that it resumes once the preemptor ends";
      }
    }
  }
  // With several tasks (srun -n N hydro-launch ...), every task's hydro-launch decides the same
  // about a checkpoint-and-exit; the one of task 0 requeues the job, once. A hang or a failure only
  // the task that saw it knows of (a peer's program fails in its collective, or waits in it): that
  // task requeues.
  const char* procid = std::getenv("SLURM_PROCID");
  if (d.requeue && !only_here && procid && std::string(procid) != "0") {
    d.requeue = false;
    d.why += " (hydro-launch of task 0 runs the requeue)";
  }
  d.restarts = restarts;
  return d;
}

}  // namespace hydro::launcher
