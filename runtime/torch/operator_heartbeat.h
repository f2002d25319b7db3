// Work between two steps, as the hang watch asks for it (hydro/hang_watch.h: WorkSignal): a probe
// registers an ATen operator callback (RecordFunction, every thread) and waits for an operator to
// start, then removes it. So an evaluation, or any stretch of work between two steps, is no hang,
// while a rank blocked in a collective, stopped, or looping without operators still is.
// Why a probe: any registered callback, even a sampled one, slows small operators (a fifth with a
// plain one, a tenth sampled at 1%, measured on torch 2.15), and the watch needs one operator per
// poll. Registered until the first operator, it costs a few of them per poll, and only once no
// step has ended for half the timeout.
#pragma once

#include <chrono>
#include <mutex>

#include "hydro/hang_watch.h"

namespace hydro {

class OperatorHeartbeat final : public WorkSignal {
 public:
  // Whether an operator starts, on any thread, within `within` (it returns at the first).
  bool working(std::chrono::milliseconds within) override;

 private:
  std::mutex mutex_;  // one probe at a time: the callback's mark is process-wide
  bool refused_ = false;
};

}  // namespace hydro
