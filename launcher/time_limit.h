// hydro-launch's own watch on the job's time limit (--time-limit-margin SECONDS).
//
// Slurm's `--signal=[B:]SIG@T` is sent once, from slurmctld's periodic check, to the steps that
// exist then; in one CI run a `-t 1 --signal=URG@45` job never got it and ran into its limit
// (a check between the job's start and its step's would do that). So hydro-launch also
// reads the job's EndTime (`scontrol show job`) and, `margin` seconds before it, asks the program
// to checkpoint and exit, then requeues the job, as on --requeue-signal. EndTime is read again
// every 5 minutes and at the deadline, so `scontrol update TimeLimit=` is followed.
#pragma once

#include <ctime>
#include <functional>
#include <optional>
#include <string>

namespace hydro::launcher {

// From `scontrol show job` output: EndTime as seconds since the epoch, given as such
// (SLURM_TIME_FORMAT=%s, as hydro-launch runs scontrol) or as Slurm's standard local time;
// nullopt when absent, Unknown or None.
std::optional<std::time_t> end_time(const std::string& scontrol_output);
// SLURM_JOB_END_TIME's value: whole seconds since the epoch; nullopt when unset or not a number.
std::optional<std::time_t> end_time_from_env(const char* value);

class TimeLimitWatch {
 public:
  // `read_end` returns the job's EndTime, nullopt when it cannot be read.
  using ReadEnd = std::function<std::optional<std::time_t>()>;
  TimeLimitWatch(int margin_s, ReadEnd read_end, std::function<void(const std::string&)> say);
  // Runs `scontrol show job JOB` with SLURM_TIME_FORMAT=%s, for at most 10 s. Where that fails (no
  // scontrol in a container), SLURM_JOB_END_TIME, which Slurm 23.02 and later set for each task
  // at its start; `say` tells it once.
  static ReadEnd from_scontrol(const std::string& scontrol, const std::string& job_id,
                               std::function<void(const std::string&)> say);

  // Milliseconds until check() has something to do; -1 once it has fired or given up.
  int poll_timeout_ms(std::time_t now) const;
  // True once, when `now` is within the margin of the job's end.
  bool check(std::time_t now);

  static constexpr int kRereadSeconds = 300;
  static constexpr int kRetrySeconds = 60;

 private:
  int margin_;
  ReadEnd read_end_;
  std::function<void(const std::string&)> say_;
  std::optional<std::time_t> next_check_;  // when to read EndTime again; empty = done
  bool first_ = true;
};

}  // namespace hydro::launcher
