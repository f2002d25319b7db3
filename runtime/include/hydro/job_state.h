// What hydro::JobRunner (hydro/job.h) keeps in each checkpoint beside the user's state, as one
// string (the checkpoint file hydro_job.pt): where the current epoch began, the epoch's metrics
// so far, and every finished epoch's (reduced) metrics. The epoch number itself is the manifest's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hydro/metrics.h"
#include "hydro/status.h"

namespace hydro {

struct EpochMetrics {
  int64_t epoch = 0;
  int64_t step = 0;  // steps done, over all epochs, when the epoch ended
  MetricsSummary metrics;
  bool operator==(const EpochMetrics& o) const { return epoch == o.epoch && step == o.step && metrics == o.metrics; }
};

class JobState {
 public:
  static constexpr const char* kFormat = "hydro-job/1";

  int64_t epoch_start_step = 0;  // steps done, over all epochs, when the current epoch began
  MetricsTracker metrics;        // the current epoch so far (this rank's)

  const std::vector<EpochMetrics>& history() const { return history_; }
  void add_history(EpochMetrics e);

  // Cheap enough for every step: the history's JSON is kept from add_history().
  std::string serialize() const;
  static Status parse(const std::string& text, const std::string& where, JobState* out);

 private:
  std::vector<EpochMetrics> history_;
  std::string history_json_ = "[]";
};

}  // namespace hydro
