// Progress of a training run for people and tools: a line through hydro's log (stderr) every
// HYDRO_PROGRESS_EVERY seconds with the step, the epoch, the rate and the ETA and the epoch's
// means so far, a line at each epoch's end, and, with HYDRO_METRICS_FILE, the same as JSON lines
// appended to that file ({"event":"progress",...} and {"event":"epoch_end",...}). Non-finite
// values are null in the JSON lines. hydro::JobRunner (hydro/job.h) drives it on rank 0.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hydro/job_state.h"
#include "hydro/metrics.h"
#include "hydro/status.h"

namespace hydro {

struct ProgressOptions {
  int64_t every_s = 30;      // HYDRO_PROGRESS_EVERY: seconds between progress lines; 0 = none
  std::string metrics_file;  // HYDRO_METRICS_FILE: JSON lines appended here; empty = none

  // Errors name the variable. `getenv` is injectable for tests.
  static Status from_env(ProgressOptions* out, const std::function<const char*(const char*)>& getenv);
  static Status from_env(ProgressOptions* out);
};

class ProgressReporter {
 public:
  using Clock = std::function<int64_t()>;  // nanoseconds, monotonic; steady_clock by default

  explicit ProgressReporter(ProgressOptions options, Clock now = nullptr);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Opens the metrics file for appending (creating it). The error names HYDRO_METRICS_FILE.
  Status open();
  // The run starts at `step` (the restored one after a resume); `total_steps` 0 = unknown (no ETA).
  void start(int64_t step, int64_t total_steps);
  // After each step: reports when every_s seconds have passed since the last report.
  void step(int64_t step, int64_t epoch, const MetricsTracker& metrics);
  // At each epoch's end: always reports.
  void epoch_end(const EpochMetrics& e);

  // The texts of the two lines (without the log prefix). steps_per_s < 0: not known yet.
  static std::string progress_text(int64_t step, int64_t total_steps, int64_t epoch, double steps_per_s,
                                   const MetricsTracker& metrics);
  static std::string epoch_text(const EpochMetrics& e);

 private:
  void append(const std::string& json_line);
  ProgressOptions options_;
  Clock now_;
  int fd_ = -1;
  int64_t total_ = 0;
  int64_t last_step_ = 0;
  int64_t last_ns_ = 0;
};

}  // namespace hydro
