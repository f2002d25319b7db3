// hydro-launch [options] -- PROGRAM ARGS
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>

#include "hydro/exit_codes.h"
#include "hydro/signal_map.h"
#include "supervisor.h"

int main(int argc, char** argv) {
  CLI::App app{
      "hydro-launch: run a training program under Slurm so that suspend, requeue and preemption cost "
      "it nothing.\n\n"
      "Resumes the program from the newest valid checkpoint in the checkpoint directory (it sets "
      "HYDRO_RESUME_FROM and HYDRO_CKPT_DIR for it), forwards SIGTSTP, SIGCONT, SIGTERM, SIGUSR1, SIGUSR2, "
      "SIGINT, SIGHUP and SIGQUIT to it, and when the program exits with status " +
          std::to_string(hydro::kExitRequeue) +
          " (checkpointed, run me again) without Slurm ending the job, runs `scontrol requeue $SLURM_JOB_ID`.\n\n"
          "In a batch script, `exec hydro-launch ...` (or `srun hydro-launch ...`) so that Slurm's signals "
          "reach it under proctrack/cgroup.",
      "hydro-launch"};
  hydro::launcher::Options o;
  if (const char* d = std::getenv("HYDRO_CKPT_DIR")) o.checkpoint_dir = d;
  std::string requeue_signal;
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Checkpoint directory, absolute (default: $HYDRO_CKPT_DIR, which the SPANK plugin sets)");
  app.add_option("--requeue-signal", requeue_signal,
                 "On this signal (e.g. URG, sent by `sbatch --signal=B:URG@120` before the time limit), ask "
                 "the program to checkpoint and exit, then requeue the job. It is not forwarded");
  app.add_option("--scontrol", o.scontrol, "scontrol to run for the requeue")->capture_default_str();
  app.add_option("command", o.command, "The program and its arguments, after --")->required();
  app.set_version_flag("--version", "hydro-launch " HYDRO_VERSION);
  CLI11_PARSE(app, argc, argv);

  if (!requeue_signal.empty()) {
    o.requeue_signal = hydro::parse_signal(requeue_signal);
    if (o.requeue_signal == 0 || o.requeue_signal == SIGKILL || o.requeue_signal == SIGSTOP ||
        o.requeue_signal == SIGCHLD) {
      std::fprintf(stderr, "hydro-launch: --requeue-signal: '%s' is not a signal that can be caught\n",
                   requeue_signal.c_str());
      return 2;
    }
  }
  if (!o.checkpoint_dir.empty() && o.checkpoint_dir[0] != '/') {
    std::fprintf(stderr, "hydro-launch: --checkpoint-dir: '%s' must be an absolute path\n", o.checkpoint_dir.c_str());
    return 2;
  }
  return hydro::launcher::run(o);
}
