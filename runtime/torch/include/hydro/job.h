// A training job in epochs, run by hydro (caffe2's JobRunner and CheckpointManager, in C++): the
// runner resumes from the newest checkpoint, runs `init` on a fresh start only, runs epochs until
// a stop condition holds, checkpoints at every epoch's end, and returns kExitRequeue when SIGTERM
// made a step checkpoint mid-epoch. Every rank calls the same things in the same order.
//
//   hydro::Runtime hydro;
//   hydro.track("model", *model);
//   hydro.track("optimizer", optimizer);
//   hydro::Job job;
//   job.init = [&](hydro::JobContext&) { torch::manual_seed(1234); };   // fresh start only
//   job.epoch = [&](int64_t epoch, hydro::JobContext& ctx) {
//     for (int64_t i = ctx.epoch_step(); i < steps_per_epoch; ++i) {  // resumes mid-epoch
//       torch::Tensor loss = train_step(epoch, i);
//       ctx.metrics().add("loss", loss.item<double>());
//       if (!ctx.step_end(i + 1)) return;                              // checkpointed: stop
//     }
//   };
//   job.exit = [&](hydro::JobContext& ctx) { save_final_model(); };     // once, at the end
//   job.epoch_limiter(10).stop_when([](const hydro::JobContext& ctx) {
//     return !ctx.history().empty() && ctx.history().back().metrics.at("loss").mean() < 0.01;
//   });
//   hydro::JobRunner runner(hydro);
//   // ranks: runner.reduce_metrics_with([&](auto& m) { return hydro::all_reduce_metrics(*group, m); });
//   return runner.run(job);                                            // 0, or kExitRequeue
//
// Epochs and steps: steps count over the whole run (Runtime::step_end's step, the checkpoint's
// name). A checkpoint at an epoch's end records the NEXT epoch, so a restart from it begins that
// epoch at epoch_step() 0; a checkpoint from step_end() mid-epoch records the current epoch, and a
// restart calls `epoch` again for it with epoch_step() at the next step. So the body must take
// what it draws at the top of an epoch from tracked state (a hydro sampler) or from a generator
// seeded by the epoch, never from the global RNG. The epoch's metrics and every finished epoch's
// summary are in the checkpoint (file hydro_job.pt), so epoch means stay exact across requeues.
//
// Stop conditions are checked before each epoch begins (not on a resume mid-epoch); at least one
// is required. Progress lines: hydro/progress.h (HYDRO_PROGRESS_EVERY, HYDRO_METRICS_FILE), on
// rank 0. Errors throw std::runtime_error naming the setting.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hydro/exit_codes.h"
#include "hydro/job_state.h"
#include "hydro/metrics.h"
#include "hydro/progress.h"

namespace hydro {

class Runtime;

class JobContext {
 public:
  int64_t epoch() const { return epoch_; }                                 // the current epoch, from 0
  int64_t step() const { return step_; }                                   // steps done over all epochs
  int64_t epoch_step() const { return step_ - state_->epoch_start_step; }  // steps done in this epoch
  MetricsTracker& metrics() { return state_->metrics; }                    // this epoch's, this rank's
  const MetricsTracker& metrics() const { return state_->metrics; }
  const std::vector<EpochMetrics>& history() const { return state_->history(); }  // finished epochs
  Runtime& runtime() { return *runtime_; }

  // Call after each step with the steps done in this epoch, epoch_step() + 1 (anything else
  // throws). Forwards to Runtime::step_end(); false when it checkpointed for SIGTERM: return from
  // the epoch then (later calls return false and do nothing).
  bool step_end(int64_t epoch_step);
  bool preempted() const { return preempted_; }

 private:
  friend class JobRunner;
  JobContext(Runtime& runtime, JobState& state, std::string& record, ProgressReporter* progress)
      : runtime_(&runtime), state_(&state), record_(&record), progress_(progress) {}
  Runtime* runtime_;
  JobState* state_;
  std::string* record_;
  ProgressReporter* progress_;
  int64_t epoch_ = 0;
  int64_t step_ = 0;
  bool preempted_ = false;
};

class Job {
 public:
  std::function<void(JobContext&)> init;                  // optional: a fresh start only
  std::function<void(int64_t epoch, JobContext&)> epoch;  // required: one epoch's steps
  std::function<void(JobContext&)> exit;                  // optional: once, when training ends
  int64_t steps_per_epoch = 0;                            // optional: for the progress ETA

  // Stop after `epochs` epochs (epochs 0 .. epochs-1).
  Job& epoch_limiter(int64_t epochs);
  // Stop when `pred` holds before an epoch begins (ctx.epoch() is the one that would begin).
  Job& stop_when(std::function<bool(const JobContext&)> pred);

 private:
  friend class JobRunner;
  std::optional<int64_t> max_epochs_;
  std::vector<std::function<bool(const JobContext&)>> stops_;
};

class JobRunner {
 public:
  // Tracks its own state in `runtime` as "hydro_job" (so: one JobRunner per Runtime, and it must
  // outlive the Runtime's saves); run() calls Runtime::resume(). The first form reads
  // HYDRO_PROGRESS_EVERY and HYDRO_METRICS_FILE.
  explicit JobRunner(Runtime& runtime);
  JobRunner(Runtime& runtime, ProgressOptions progress);

  // Several ranks: how an epoch's metrics become the job's (all_reduce_metrics in
  // hydro/distributed.h). Without it, each rank's history holds its own metrics.
  void reduce_metrics_with(std::function<MetricsTracker(const MetricsTracker&)> reduce);

  // Runs `job` to its end: 0 once `exit` ran, kExitRequeue after a SIGTERM checkpoint.
  int run(Job& job);

  const std::vector<EpochMetrics>& history() const { return state_.history(); }

 private:
  bool should_stop(const Job& job, const JobContext& ctx) const;
  void end_epoch(JobContext& ctx, ProgressReporter* progress);
  Runtime& runtime_;
  ProgressOptions progress_options_;
  std::function<MetricsTracker(const MetricsTracker&)> reduce_;
  JobState state_;
  std::string record_;  // state_ serialized: what Runtime saves as hydro_job.pt
  bool ran_ = false;
};

}  // namespace hydro
