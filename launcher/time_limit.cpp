#include "time_limit.h"

#include <cstdlib>
#include <regex>

#include "hydro/subprocess.h"

namespace hydro::launcher {

std::optional<std::time_t> end_time(const std::string& text) {
  // SLURM_TIME_FORMAT=%s: seconds since the epoch, free of time zones and the user's format.
  static const std::regex epoch(R"((?:^|\s)EndTime=(\d{9,12})(?:\s|$))");
  std::smatch e;
  if (std::regex_search(text, e, epoch)) return static_cast<std::time_t>(std::stoll(e[1]));
  static const std::regex re(R"((?:^|\s)EndTime=(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\s|$))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return std::nullopt;
  std::tm tm{};
  tm.tm_year = std::stoi(m[1]) - 1900;
  tm.tm_mon = std::stoi(m[2]) - 1;
  tm.tm_mday = std::stoi(m[3]);
  tm.tm_hour = std::stoi(m[4]);
  tm.tm_min = std::stoi(m[5]);
  tm.tm_sec = std::stoi(m[6]);
  tm.tm_isdst = -1;
  std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return t;
}

TimeLimitWatch::TimeLimitWatch(int margin_s, ReadEnd read_end, std::function<void(const std::string&)> say)
    : margin_(margin_s), read_end_(std::move(read_end)), say_(std::move(say)), next_check_(std::time_t{0}) {}

std::optional<std::time_t> end_time_from_env(const char* value) {
  if (!value) return std::nullopt;
  static const std::regex epoch(R"(\d{9,12})");
  if (!std::regex_match(value, epoch)) return std::nullopt;
  return static_cast<std::time_t>(std::stoll(value));
}

TimeLimitWatch::ReadEnd TimeLimitWatch::from_scontrol(const std::string& scontrol, const std::string& job_id,
                                                      std::function<void(const std::string&)> say) {
  return [scontrol, job_id, say, said = false]() mutable -> std::optional<std::time_t> {
    std::string out;
    // Times as epoch seconds whatever the user's SLURM_TIME_FORMAT; at most 10 s: a slurmctld
    // that does not answer must not hold up hydro-launch's signal forwarding for long.
    if (run_capture({"env", "SLURM_TIME_FORMAT=%s", "timeout", "10", scontrol, "show", "job", job_id}, &out) == 0)
      return end_time(out);
    std::optional<std::time_t> end = end_time_from_env(std::getenv("SLURM_JOB_END_TIME"));
    if (end && !said)
      say("time limit: `" + scontrol +
          " show job` cannot run here (a container?): the job's end from "
          "SLURM_JOB_END_TIME instead, as it was when this task started (a later suspend or TimeLimit= is not "
          "followed)");
    said = said || end;
    return end;
  };
}

int TimeLimitWatch::poll_timeout_ms(std::time_t now) const {
  if (!next_check_) return -1;
  if (*next_check_ <= now) return 0;
  return static_cast<int>((*next_check_ - now) * 1000);
}

bool TimeLimitWatch::check(std::time_t now) {
  if (!next_check_ || now < *next_check_) return false;
  std::optional<std::time_t> end = read_end_();
  bool first = first_;
  first_ = false;
  if (!end) {
    if (first)
      say_("time limit: cannot read the job's EndTime from scontrol; trying again every " +
           std::to_string(kRetrySeconds) + " s");
    next_check_ = now + kRetrySeconds;
    return false;
  }
  std::time_t deadline = *end - margin_;
  if (now < deadline) {
    if (first)
      say_("time limit: the job ends at " + std::to_string(*end - now) + " s from now; checkpointing " +
           std::to_string(margin_) + " s before");
    next_check_ = std::min<std::time_t>(deadline, now + kRereadSeconds);
    return false;
  }
  next_check_.reset();
  if (first) {
    // Requeueing at once would only requeue again and again; the time limit's SIGTERM still
    // has the program checkpoint.
    say_("warning: time limit: the job ends in " + std::to_string(*end - now) + " s, within --time-limit-margin " +
         std::to_string(margin_) + " s already at the start; not requeueing early this run");
    return false;
  }
  return true;
}

}  // namespace hydro::launcher
