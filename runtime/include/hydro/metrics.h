// Per-step metrics of the current epoch (caffe2's JobRunner idea): each named metric keeps its
// sum, count, min and max, so an epoch's mean is exact however the epoch was cut by requeues, and
// ranks combine by adding sums and counts (merge()). Plain C++: the cross-rank gather is in
// hydro/distributed.h (all_reduce_metrics), the checkpointing in hydro/job.h (JobRunner).
//
//   hydro::MetricsTracker m;
//   m.add("loss", loss.item<double>());        // every step
//   double mean = m.mean("loss");              // the epoch so far
//   m.reset_epoch();                           // at the epoch's end
//
// Non-finite values are kept as they come (a NaN loss makes the sum NaN; min and max skip NaN).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hydro/status.h"

namespace hydro {

struct MetricStats {
  double sum = 0;
  int64_t count = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double mean() const {
    return count > 0 ? sum / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
  }
  bool operator==(const MetricStats& o) const;  // bit-for-bit (NaN equals NaN)
  bool operator!=(const MetricStats& o) const { return !(*this == o); }
};

// Metric name -> its stats, in name order.
using MetricsSummary = std::map<std::string, MetricStats>;

class MetricsTracker {
 public:
  static constexpr const char* kFormat = "hydro-metrics/1";

  void add(const std::string& name, double value);
  // The mean of `name` over this epoch so far; NaN when nothing was added under that name.
  double mean(const std::string& name) const;
  const MetricsSummary& epoch_summary() const { return stats_; }
  std::vector<std::string> names() const;
  bool empty() const { return stats_.empty(); }
  void reset_epoch() { stats_.clear(); }

  // Adds another tracker's epoch (another rank's): sums and counts add, min of mins, max of
  // maxes. Both must hold the same names; otherwise nothing changes and the error names the first
  // name that only one of them has.
  Status merge(const MetricsTracker& other);

  // A stable text form (JSON, names in order, doubles exact; inf and nan as strings), and back.
  // `where` names the source (a file, a rank) in parse errors.
  std::string serialize() const;
  static Status parse(const std::string& text, const std::string& where, MetricsTracker* out);

  bool operator==(const MetricsTracker& o) const { return stats_ == o.stats_; }

 private:
  MetricsSummary stats_;
};

}  // namespace hydro
