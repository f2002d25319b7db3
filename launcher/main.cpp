// hydro-launch [options] -- PROGRAM ARGS
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>

#include "hydro/exit_codes.h"
#include "hydro/setting_schema.h"
#include "hydro/signal_map.h"
#include "hydro/version.h"
#include "supervisor.h"
#include "watchdog.h"

namespace {

using hydro::env_name;
using hydro::Setting;
using hydro::launcher::Options;

std::string description() {
  return "hydro-launch: run a training program under Slurm so that suspend, requeue and preemption cost "
         "it nothing.\n\n"
         "Resumes the program from the newest valid checkpoint in the checkpoint directory (it sets "
         "HYDRO_RESUME_FROM and HYDRO_CKPT_DIR for it), forwards SIGTSTP, SIGCONT, SIGTERM, SIGINT, SIGHUP, SIGQUIT "
         "and "
         "every signal of the job's signal map ($HYDRO_SIGNALS, which the SPANK plugin sets from --hydro-signals or "
         "the "
         "admin's signals; by default also SIGUSR1, SIGUSR2 and SIGWINCH) to it, and when the program exits with "
         "status " +
         std::to_string(hydro::kExitRequeue) +
         " (checkpointed, run me again) without Slurm ending the job, runs `scontrol requeue $SLURM_JOB_ID`. "
         "Where that fails (no scontrol in a container), it exits with status " +
         std::to_string(hydro::kExitRequeueJob) +
         " instead, which the host turns into the requeue: hydro's SPANK plugin, or slurm.conf's RequeueExit=" +
         std::to_string(hydro::kExitRequeueJob) +
         ".\n\n"
         "With --watchdog-file, serves torch elastic's FileTimerServer protocol on that FIFO: workers arm "
         "timers (torch.distributed.elastic.timer.FileTimerClient, or hydro::WatchdogClient/ScopedTimer) "
         "and when one expires hydro-launch sends the timer's signal (SIGKILL by default) to the worker's "
         "whole process group, then treats the program's end as a hang: it requeues the job (up to "
         "--max-restarts times) and exits with status " +
         std::to_string(hydro::kExitRequeue) + ", or " + std::to_string(hydro::kExitWatchdog) +
         " once the restarts are used up.\n\n"
         "In a batch script, `exec hydro-launch ...` (or `srun hydro-launch ...`) so that Slurm's signals "
         "reach it under proctrack/cgroup.";
}

void fail(const std::string& message) { std::fprintf(stderr, "hydro-launch: %s\n", message.c_str()); }

// A setting's value, checked against hydro's settings schema (the plugin's ranges); false (and a
// message naming `where`) when it is out of them.
bool valid(const char* env, const std::string& value, const std::string& where) {
  hydro::Status st = hydro::check_setting(hydro::setting_row(env), value, where);
  if (!st.ok()) fail(st.message());
  return st.ok();
}

// A whole-number default from the job's environment.
bool env_number(const char* env, int* out) {
  const char* m = std::getenv(env);
  if (!m || !*m) return true;
  if (!valid(env, m, env)) return false;
  *out = std::stoi(m);
  return true;
}

// The defaults the job's environment gives (the plugin sets them): false on a bad value.
bool read_env_defaults(Options* o) {
  if (const char* d = std::getenv(env_name(Setting::checkpoint_dir))) o->checkpoint_dir = d;
  if (!env_number(env_name(Setting::max_restarts), &o->max_restarts) ||
      !env_number(env_name(Setting::restarts), &o->restarts) ||
      !env_number(env_name(Setting::time_limit_margin), &o->time_limit_margin))
    return false;
  if (const char* map = std::getenv(env_name(Setting::signals))) {
    hydro::Status st = hydro::SignalMap::parse(map, env_name(Setting::signals), &o->signals);
    if (!st.ok()) {
      fail(st.message());
      return false;
    }
  }
  return true;
}

void add_options(CLI::App& app, Options& o, std::string& requeue_signal) {
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Checkpoint directory, absolute (default: $HYDRO_CKPT_DIR, which the SPANK plugin sets)");
  app.add_option("--requeue-signal", requeue_signal,
                 "On this signal (e.g. URG, sent by `sbatch --signal=B:URG@120` before the time limit), ask "
                 "the program to checkpoint and exit (with the map's checkpoint_exit signal, SIGTERM by default), "
                 "then requeue the job. It is not forwarded");
  app.add_option(
      "--watchdog-file", o.watchdog_file,
      "Watchdog timer FIFO, absolute path (default: no watchdog); %t is the task's rank (SLURM_PROCID), %j the "
      "job id, %% a percent sign. One per task: a FIFO another hydro-launch serves is refused. Created with "
      "mode 0600 if absent and removed at exit; an existing FIFO of yours with no group or other permission "
      "is used and kept; a symlink or any other file is refused. "
      "Exported to the program as HYDRO_WATCHDOG_FILE and TORCHELASTIC_TIMER_FILE");
  app.add_option("--watchdog-kill-after", o.watchdog_kill_after,
                 "Seconds after a timer's SIGTERM, SIGINT, SIGHUP or SIGQUIT (a timer may ask for one instead of "
                 "SIGKILL) at which a worker still running gets SIGKILL, with its process group; 0 = never")
      ->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts,
                 "hydro-launch's own requeues (the time limit's --requeue-signal, a program asking to be run "
                 "again, a watchdog expiry) happen only while SLURM_RESTART_COUNT is below this (default: "
                 "$HYDRO_MAX_RESTARTS, which the SPANK plugin sets from --hydro-max-restarts or the admin's "
                 "max_restarts, else 3). Requeues by Slurm (scontrol requeue, preemption) are not counted against it")
      ->capture_default_str();
  app.add_option("--restarts", o.restarts,
                 "When the program crashes (a signal, or a status other than 0 and 75) or the watchdog kills it, "
                 "start it again inside the job's allocation, from its newest checkpoint, up to this many times, "
                 "with HYDRO_RESTART_GENERATION=1, 2, ... (default: $HYDRO_RESTARTS, which the SPANK plugin sets "
                 "from --hydro-restarts or the admin's restarts, else 0 = never). A restart that fails again "
                 "before a newer checkpoint is not tried again. After the last one the job is requeued, up to "
                 "--max-restarts. With several tasks in the step, every task's program restarts together: the "
                 "tasks' hydro-launch meet at MASTER_ADDR:MASTER_PORT + 2 (MUNGE, this job step only)")
      ->capture_default_str();
  app.add_option("--time-limit-margin", o.time_limit_margin,
                 "Seconds before the job's time limit (its EndTime, read with `scontrol show job` at the start, "
                 "every 5 minutes and at the deadline) at which to ask the program to checkpoint and exit, then "
                 "requeue the job, as on --requeue-signal (default: $HYDRO_TIME_LIMIT_MARGIN, which the SPANK "
                 "plugin sets from --hydro-time-limit-margin or the admin's time_limit_margin, else 0 = off). "
                 "Unlike `--signal`, which slurmctld sends once to the steps that exist then, it does not depend "
                 "on a delivery. Give the save time: the margin must cover the last step and the checkpoint")
      ->capture_default_str();
  app.add_option("--scontrol", o.scontrol, "scontrol to run (requeue, show job)")->capture_default_str();
  app.add_option("command", o.command, "The program and its arguments, after --")->required();
  app.set_version_flag("--version", std::string("hydro-launch ") + hydro::version());
}

// Checks what the command line gave, and expands --watchdog-file's %t and %j.
bool check_options(Options* o, const std::string& requeue_signal) {
  if (!requeue_signal.empty()) {
    o->requeue_signal = hydro::parse_signal(requeue_signal);
    if (o->requeue_signal == 0 || o->requeue_signal == SIGKILL || o->requeue_signal == SIGSTOP ||
        o->requeue_signal == SIGCHLD) {
      std::fprintf(stderr, "hydro-launch: --requeue-signal: '%s' is not a signal that can be caught\n",
                   requeue_signal.c_str());
      return false;
    }
  }
  if (!o->checkpoint_dir.empty() && o->checkpoint_dir[0] != '/') {
    std::fprintf(stderr, "hydro-launch: --checkpoint-dir: '%s' must be an absolute path\n", o->checkpoint_dir.c_str());
    return false;
  }
  if (!o->watchdog_file.empty()) {
    std::string path;
    hydro::Status st = hydro::launcher::Watchdog::expand_path(
        o->watchdog_file, [](const char* v) { return std::getenv(v); }, &path);
    if (!st.ok()) {
      fail(st.message());
      return false;
    }
    o->watchdog_file = path;
  }
  if (!o->watchdog_file.empty() && o->watchdog_file[0] != '/') {
    std::fprintf(stderr, "hydro-launch: --watchdog-file: '%s' must be an absolute path\n", o->watchdog_file.c_str());
    return false;
  }
  if (!(o->watchdog_kill_after >= 0) || o->watchdog_kill_after > 86400) {
    std::fprintf(stderr, "hydro-launch: --watchdog-kill-after: %g must be between 0 and 86400 seconds\n",
                 o->watchdog_kill_after);
    return false;
  }
  if (!valid(env_name(Setting::max_restarts), std::to_string(o->max_restarts), "--max-restarts") ||
      !valid(env_name(Setting::restarts), std::to_string(o->restarts), "--restarts") ||
      !valid(env_name(Setting::time_limit_margin), std::to_string(o->time_limit_margin), "--time-limit-margin"))
    return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{description(), "hydro-launch"};
  Options o;
  std::string requeue_signal;
  if (!read_env_defaults(&o)) return 2;
  add_options(app, o, requeue_signal);
  CLI11_PARSE(app, argc, argv);
  if (!check_options(&o, requeue_signal)) return 2;
  return hydro::launcher::run(o);
}
