// hydro::JobRunner: epochs, stop conditions and the epoch-end checkpoint over hydro::Runtime. The
// record it checkpoints (hydro/job_state.h) and the progress lines (hydro/progress.h) are core.
#include "hydro/job.h"

#include <stdexcept>

#include "hydro/log.h"
#include "hydro/runtime.h"
#include "raise.h"

namespace hydro {
namespace {

ProgressOptions progress_from_env() {
  ProgressOptions o;
  Status st = ProgressOptions::from_env(&o);
  if (!st.ok()) throw_status(st);
  return o;
}

}  // namespace

bool JobContext::step_end(int64_t epoch_step) {
  if (preempted_) return false;
  if (epoch_step != this->epoch_step() + 1)
    throw_status(Status::invalid_argument(
        "JobContext::step_end(" + std::to_string(epoch_step) + ") in epoch " + std::to_string(epoch_) + ": expected " +
        std::to_string(this->epoch_step() + 1) + ", the steps done in this epoch (epoch_step() + 1)"));
  step_ = state_->epoch_start_step + epoch_step;
  *record_ = state_->serialize();  // saved if Runtime::step_end checkpoints
  if (progress_) progress_->step(step_, epoch_, state_->metrics);
  if (runtime_->step_end(step_)) return true;
  preempted_ = true;
  return false;
}

Job& Job::epoch_limiter(int64_t epochs) {
  if (epochs < 0)
    throw_status(Status::invalid_argument("Job::epoch_limiter(" + std::to_string(epochs) + "): must be >= 0"));
  max_epochs_ = epochs;
  return *this;
}

Job& Job::stop_when(std::function<bool(const JobContext&)> pred) {
  if (!pred) throw_status(Status::invalid_argument("Job::stop_when(): the predicate is empty"));
  stops_.push_back(std::move(pred));
  return *this;
}

JobRunner::JobRunner(Runtime& runtime) : JobRunner(runtime, progress_from_env()) {}

JobRunner::JobRunner(Runtime& runtime, ProgressOptions progress)
    : runtime_(runtime), progress_options_(std::move(progress)) {
  runtime_.track("hydro_job", record_);
}

void JobRunner::reduce_metrics_with(std::function<MetricsTracker(const MetricsTracker&)> reduce) {
  reduce_ = std::move(reduce);
}

bool JobRunner::should_stop(const Job& job, const JobContext& ctx) const {
  if (job.max_epochs_ && ctx.epoch() >= *job.max_epochs_) return true;
  for (const auto& pred : job.stops_)
    if (pred(ctx)) return true;
  return false;
}

void JobRunner::end_epoch(JobContext& ctx, ProgressReporter* progress) {
  EpochMetrics done{ctx.epoch_, ctx.step_, (reduce_ ? reduce_(state_.metrics) : state_.metrics).epoch_summary()};
  state_.add_history(done);
  state_.metrics.reset_epoch();
  state_.epoch_start_step = ctx.step_;
  ctx.epoch_ += 1;
  // The checkpoint records the next epoch: a restart from it begins there.
  runtime_.set_epoch(ctx.epoch_);
  record_ = state_.serialize();
  if (progress) progress->epoch_end(done);
  if (!runtime_.settings().checkpoint_dir.empty()) runtime_.save(ctx.step_);
}

int JobRunner::run(Job& job) {
  if (!job.epoch) throw_status(Status::invalid_argument("Job::epoch is not set: it runs one epoch's steps"));
  if (!job.max_epochs_ && job.stops_.empty())
    throw_status(Status::invalid_argument("the Job has no stop condition: call epoch_limiter(n) or stop_when(...)"));
  if (ran_) throw_status(Status::invalid_argument("JobRunner::run() runs one job: make a new Runtime and JobRunner"));
  ran_ = true;

  std::unique_ptr<ProgressReporter> progress;
  if (runtime_.settings().rank == 0) {
    progress = std::make_unique<ProgressReporter>(progress_options_);
    Status st = progress->open();
    if (!st.ok()) throw_status(st);
  }
  record_.clear();
  const int64_t step = runtime_.resume();
  JobContext ctx(runtime_, state_, record_, progress.get());
  ctx.step_ = step;
  if (record_.empty()) {
    state_ = JobState();
    state_.epoch_start_step = step;
    runtime_.set_epoch(0);
    if (job.init) job.init(ctx);
  } else {
    Status st = JobState::parse(record_, "checkpoint file hydro_job.pt", &state_);
    if (st.ok() && state_.epoch_start_step > step)
      st = Status::corruption("checkpoint file hydro_job.pt: the epoch began at step " +
                              std::to_string(state_.epoch_start_step) + ", after the checkpoint's step " +
                              std::to_string(step));
    if (!st.ok()) throw_status(st);
    ctx.epoch_ = runtime_.epoch();
    log("job: resuming epoch " + std::to_string(ctx.epoch_) + " at its step " + std::to_string(ctx.epoch_step()) +
        " (step " + std::to_string(step) + ")");
  }
  if (progress) {
    const int64_t total = job.max_epochs_ && job.steps_per_epoch > 0 ? *job.max_epochs_ * job.steps_per_epoch : 0;
    progress->start(step, total);
  }
  for (;;) {
    // A restart mid-epoch finishes the epoch that was begun.
    if (ctx.epoch_step() == 0 && should_stop(job, ctx)) break;
    runtime_.set_epoch(ctx.epoch_);
    job.epoch(ctx.epoch_, ctx);
    if (ctx.preempted_) return kExitRequeue;
    end_epoch(ctx, progress.get());
  }
  log("job: stopped before epoch " + std::to_string(ctx.epoch_) + " at step " + std::to_string(ctx.step_));
  if (job.exit) job.exit(ctx);
  return 0;
}

}  // namespace hydro
