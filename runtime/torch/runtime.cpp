// Saving and loading the tracked state through the core's checkpoint protocol (the decisions at
// each step's end: step_end.cpp; the operator callback and the signals: operator_pause.cpp).
#include "hydro/runtime.h"

#include <signal.h>
#include <unistd.h>

#include <optional>
#include <set>
#include <stdexcept>

#include "hydro/atomic_file.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/checkpoint_group.h"
#include "hydro/hang_watch.h"
#include "hydro/tcp_store.h"
#include "compute_threads.h"
#include "operator_heartbeat.h"
#include "operator_pause.h"
#include "snapshot.h"
#include "tracked.h"
#include "hydro/launch_ready.h"
#include "hydro/log.h"
#include "hydro/pause_gate.h"
#include "hydro/resume_choice.h"
#include "raise.h"

namespace hydro {
namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Runtime::Runtime() : Runtime(settings_from_env()) {}

Runtime::Runtime(Settings settings) : Runtime(std::move(settings), posix_fs()) {}

Runtime::Runtime(Settings settings, Fs& fs) : settings_(std::move(settings)), fs_(fs) {
  PauseGate::instance().clear_requests();
  // --hydro-pause=off: no pause handlers, but SIGTERM still checkpoints.
  start_signals(settings_, settings_.pause ? settings_.signals
                                           : settings_.signals.only({Action::checkpoint_exit, Action::checkpoint}));
  set_direct_io(settings_.direct_io);
  // Announced once: by hydro-launch when it runs the program, else here by rank 0.
  if (std::string note = default_checkpoint_dir_note();
      settings_.rank == 0 && !note.empty() && !std::getenv(kLaunchReadyEnv))
    log(note);
  tell_launcher_ready();  // hydro-launch may now ask for a checkpoint-and-exit
  try {
    if (settings_.world_size > 1 && settings_.mode != CheckpointMode::async && !settings_.checkpoint_dir.empty())
      open_group();
    pool_ = std::make_unique<TensorPool>();  // async saves' copies, and sync saves' of device tensors
  } catch (...) {
    // No destructor runs for a constructor that throws: leave no handlers behind (SIGTERM would
    // otherwise only set a flag, and no later Runtime could start).
    tell_launcher_closed();
    stop_signals();
    throw;
  }
}

// The ranks' store (rank 0 serves it) and the group that votes and saves through it.
void Runtime::open_group() {
  const auto timeout = std::chrono::seconds(settings_.store_timeout_s);
  Status st = open_job_store(settings_.dist, timeout, &store_server_, &store_);
  if (!st.ok()) throw std::runtime_error("hydro: " + st.message());
  group_ = std::make_unique<CheckpointGroup>(*store_, settings_.rank, settings_.world_size, host_name(), timeout);
}

void Runtime::every_rank_writes() {
  if (settings_.mode != CheckpointMode::async || settings_.world_size == 1 || settings_.checkpoint_dir.empty() ||
      saver_)
    return;
  if (resumed_)
    throw_status(Status::invalid_argument(
        "HYDRO_CKPT_MODE=async with several ranks: track each rank's own (sharded) state before resume(), "
        "which then agrees with the other ranks on the checkpoint to load"));
  wait_idle();  // a save started before is rank 0's alone
  open_group();
  // The saves' own connection and rounds: a save in flight on the background thread never holds up
  // the vote at a step's end, and every rank runs its saves and its votes in the same order.
  const auto timeout = std::chrono::seconds(settings_.store_timeout_s);
  Status st = connect_tcp_store(settings_.dist.master_addr, settings_.dist.store_port(), store_scope_from_env(),
                                timeout, &save_store_);
  if (!st.ok()) {
    group_.reset();  // no half set-up: without the saves' group every rank would write alone
    store_.reset();
    store_server_.reset();
    throw std::runtime_error("hydro: the ranks' store, for the async saves: " + st.message());
  }
  saver_ = std::make_unique<CheckpointGroup>(*save_store_, settings_.rank, settings_.world_size, host_name(), timeout,
                                             "hydro-async");
}

void Runtime::wait_idle() {
  persist_.wait();
  pruner_.wait();
  if (!persist_error_.empty()) {
    std::string e = std::move(persist_error_);
    persist_error_.clear();
    throw std::runtime_error("hydro: async checkpoint failed: " + e);
  }
}

Runtime::~Runtime() {
  // The training is over: hydro-launch asks no checkpoint-and-exit from now on, which would only
  // cut the teardown short once the handlers are gone (stop_signals, below).
  tell_launcher_closed();
  hang_watch_.reset();  // the teardown below is no step: it may take long
  try {
    wait_idle();
  } catch (const std::exception& e) {
    log(std::string("warning: ") + e.what());
  }
  if (grouped()) {
    // Rank 0 serves the ranks' store: it stays until every rank has read the last vote.
    int missing = 0;
    Status st = group_->leave(std::chrono::seconds(60), &missing);
    if (!st.ok()) log("warning: closing the ranks' store: " + st.message());
  }
  stop_signals();
}

void Runtime::add(TrackedItem t) {
  if (!valid_tracked_name(t.name)) throw_status(Status::invalid_argument("track(): bad name '" + t.name + "'"));
  for (const auto& x : tracked_)
    if (x.name == t.name) throw_status(Status::invalid_argument("track(): '" + t.name + "' is tracked twice"));
  tracked_.push_back(std::move(t));
}

void Runtime::track(const std::string& name, torch::nn::Module& module) { add(module_item(name, module)); }

void Runtime::track(const std::string& name, torch::optim::Optimizer& optimizer) {
  add(optimizer_item(name, optimizer));
}

void Runtime::track(const std::string& name, torch::data::samplers::Sampler<>& sampler) {
  add(sampler_item(name, sampler));
}

void Runtime::track(const std::string& name, torch::Tensor& tensor) { add(tensor_item(name, tensor)); }

void Runtime::track(const std::string& name, std::string& value) { add(string_item(name, value)); }

void Runtime::track_stream(const std::string& name, StreamWriter write, std::function<void(const std::string&)> read,
                           std::function<StreamWriter()> capture) {
  add(stream_item(name, std::move(write), std::move(read), std::move(capture)));
}

void atomic_save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  Status st = write_file_atomic(path, [&](WritableFile& f) {
    return stream_archive(archive, path, [&](const void* d, size_t n) { return f.append(d, n); });
  });
  if (Status s = warn_if_durability_uncertain(st); !s.ok()) throw_status(s);
}

bool Runtime::writes_checkpoints() const {
  return !settings_.checkpoint_dir.empty() && (settings_.rank == 0 || grouped());
}

void Runtime::start_pruner() {
  if (settings_.keep_last <= 0) return;
  pruner_.start([root = settings_.checkpoint_dir, keep = settings_.keep_last, &fs = fs_] {
    CheckpointDir d(root, fs);
    Status p = d.prune(keep);
    if (!p.ok()) log("warning: removing old checkpoints: " + p.message());
  });
}

std::string Runtime::save(int64_t step, bool keep_always) {
  if (settings_.checkpoint_dir.empty())
    throw_status(Status::invalid_argument("cannot checkpoint: HYDRO_CKPT_DIR is not set"));
  if (!writes_checkpoints()) return "";  // replicated state: rank 0 writes it for every rank
  const auto t0 = std::chrono::steady_clock::now();
  struct TimeOnReturn {
    Runtime* rt;
    std::chrono::steady_clock::time_point t0;
    ~TimeOnReturn() {
      rt->last_save_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rt->update_suspend_budget();
    }
  } timed{this, t0};
  if (saver_) return save_in_step(step, keep_always);
  wait_idle();
  if (settings_.mode == CheckpointMode::async) return save_async(step, keep_always);
  // Old checkpoints go on a background thread, after the commit: one rank's, or in a group the
  // committing rank's, once it has told the others (every rank's shard of them: N x state).
  CheckpointDir dir(settings_.checkpoint_dir, fs_);
  auto fill = [&](CheckpointWriter& w) -> Status {
    const ComputeThreads threads = compute_threads();
    w.set_threads(threads.aten, threads.blas);
    for (const auto& t : tracked_) {
      HYDRO_RETURN_IF_ERROR(write_item(w, t, pool_.get()));
    }
    return write_item(w, rng_item());
  };
  CheckpointInfo info;
  Status st;
  if (grouped()) {
    st = group_->save(dir, step, keep_always, epoch_, fill, &info, dcp_metadata_ ? &dcp_metadata_ : nullptr);
  } else {
    st = dir.open();
    std::unique_ptr<CheckpointWriter> writer;
    if (st.ok()) st = dir.begin(step, &writer);
    if (st.ok()) {
      writer->set_keep(keep_always);
      writer->set_epoch(epoch_);
      st = fill(*writer);
    }
    if (st.ok() && dcp_metadata_) st = writer->compose_dcp_metadata(dcp_metadata_);
    if (st.ok()) st = writer->commit(&info);
  }
  if (Status s = warn_if_durability_uncertain(st); !s.ok()) throw_status(s);
  if (!grouped() || group_->committed_last()) start_pruner();
  return info.path;
}

std::string Runtime::load_path(const std::string& checkpoint, const Manifest& m, const std::string& file) const {
  if (!m.sharded) return checkpoint + "/" + file;
  if (m.world_size == settings_.world_size)
    return checkpoint + "/" + CheckpointGroup::shard_dir(settings_.rank) + "/" + file;
  if (!reshard_ || m.world_size < 1)
    throw_status(Status::invalid_argument(
        "checkpoint " + checkpoint + " has the shards of " + std::to_string(m.world_size) + " ranks, this job has " +
        std::to_string(settings_.world_size) + ": resume with the same number of ranks"));
  return checkpoint + "/" + CheckpointGroup::shard_dir(settings_.rank % m.world_size) + "/" + file;
}

int64_t Runtime::resume() {
  resumed_ = true;
  ResumeChoice choice;
  Status st = choose_resume(
      fs_, settings_, group_.get(), [](const std::string& m) { log(m); }, &choice, reshard_);
  if (!st.ok()) throw_status(st);
  const std::string& path = choice.path;
  const Manifest& manifest = choice.manifest;
  if (path.empty()) {
    log("no checkpoint to resume from: starting at step 0");
    return 0;
  }
  std::vector<const TrackedItem*> files;
  for (const auto& t : tracked_) files.push_back(&t);
  files.push_back(&rng_item());
  // Device tensors go back to their devices through the pool's pinned slots (issue 58), which the
  // first save then reuses.
  std::optional<TensorPool::Restoring> restoring;
  if (pool_->stages_device_tensors()) restoring.emplace(*pool_);
  for (const auto* t : files) {
    try {
      t->read(load_path(path, manifest, t->name + ".pt"));
    } catch (const c10::Error& e) {
      throw_status(
          Status::invalid_argument("checkpoint " + path + ": " + t->name + ".pt: " + e.what_without_backtrace()));
    } catch (const std::exception& e) {
      throw_status(Status::invalid_argument("checkpoint " + path + ": " + t->name + ".pt: " + e.what()));
    }
  }
  epoch_ = manifest.epoch;
  resumed_name_ = CheckpointDir::name_for(manifest.step);
  if (manifest.sharded && manifest.world_size != settings_.world_size)
    log("resharded: checkpoint of " + std::to_string(manifest.world_size) + " ranks, this job has " +
        std::to_string(settings_.world_size) + "; this rank's other files are rank " +
        std::to_string(settings_.rank % manifest.world_size) + "'s");
  log("resumed from " + path + " at step " + std::to_string(manifest.step));
  const std::string threads = compute_threads_note({manifest.threads, manifest.blas_threads}, compute_threads());
  if (!threads.empty()) log(threads);
  return manifest.step;
}

}  // namespace hydro
