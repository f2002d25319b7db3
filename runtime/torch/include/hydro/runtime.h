// hydro's libtorch-facing API: the few lines a training loop adds.
//
//   hydro::Runtime hydro;                          // signals, pause, checkpoint dir from the env
//   hydro.track("model", *model);
//   hydro.track("optimizer", optimizer);
//   for (int64_t step = hydro.resume(); step < steps;) {
//     ... one training step ...
//     if (!hydro.step_end(++step)) return hydro::kExitRequeue;   // checkpointed; run me again
//   }
//
// Pausing: a pause signal (SIGTSTP, SIGUSR1 by default) blocks every thread at its next ATen
// operator (forward, backward, optimizer), or the training loop at step_end() if no operator runs.
// A resume signal (SIGCONT, SIGUSR2) releases it. The operator callback is enabled only while a
// pause is pending, so training runs at full speed otherwise.
//
// With CUDA, a pausing thread first waits for the device (torch::cuda::synchronize). Then
// HYDRO_GPU_RELEASE=cache gives the allocator's cached, unused device memory back to the driver,
// and =full moves the process's whole device state to host memory until the resume
// (docs/users-guide.md, "GPU").
//
// SIGTERM: the current step finishes, step_end() commits a checkpoint and returns false.
//
// Several ranks (WORLD_SIZE or SLURM_STEP_NUM_TASKS above 1), by HYDRO_CKPT_MODE (hydro/settings.h):
//   sync_any (default), sync_all: the ranks vote at every step_end() through a TCPStore that rank 0
//     serves at MASTER_ADDR:MASTER_PORT+1; when the vote says so, every rank writes its own shard
//     (all its tracked state and RNG) into rank-R/ of one checkpoint, committed when every shard is
//     durable (hydro/checkpoint_group.h), and every rank resumes from its own shard.
//   async: only rank 0 writes, and every rank resumes from rank 0's state: the tracked state must
//     then be the same on every rank, as in data-parallel training (hydro/distributed.h). State that
//     is each rank's own: every_rank_writes(), below.
//
// HYDRO_CKPT_MODE=async: save() copies the state into reused host buffers and returns; a background
// thread writes and commits it. The next save(), a SIGTERM checkpoint, wait_idle() and the
// destructor wait for it; a failure of the background write is thrown by the next of these.
// HYDRO_ASYNC_COPY=behind with copy_behind(): save() returns before the copies are made.
//
// Errors throw std::runtime_error whose message names the file or setting.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sys/types.h>

#include "hydro/background_job.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/exit_codes.h"
#include "hydro/manifest.h"
#include "hydro/settings.h"

namespace hydro {

class HangWatch;
class OperatorHeartbeat;
class RankStore;
class TcpStoreServer;
class CheckpointGroup;
class TensorPool;
struct TrackedItem;

class Runtime {
 public:
  Runtime();  // Settings::from_env()
  explicit Runtime(Settings settings);
  // Every checkpoint-directory operation (listing, staging, writing, fsync, rename, prune) goes
  // through `fs`, which outlives the Runtime: tests pass one that injects faults or cuts power.
  Runtime(Settings settings, Fs& fs);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // State saved in every checkpoint and restored by resume(). Names are file names: [A-Za-z0-9_-].
  void track(const std::string& name, torch::nn::Module& module);
  void track(const std::string& name, torch::optim::Optimizer& optimizer);
  // User extras: a named tensor (resume() replaces it with the saved one) and a string.
  void track(const std::string& name, torch::Tensor& tensor);
  // A data sampler's position (its save()/load()), e.g. hydro's interruptible samplers: resume()
  // continues the epoch at the next sample.
  void track(const std::string& name, torch::data::samplers::Sampler<>& sampler);
  void track(const std::string& name, std::string& value);
  // Anything else, as the file NAME.pt of each checkpoint (the Python binding tracks objects this
  // way): `write` streams the file's bytes, `read` loads the state from the file's path and throws
  // on failure. Async mode: `capture`, if given, copies the state now and returns a writer of the
  // copy that runs on the background thread; without it the bytes are serialized into memory now.
  void track_stream(const std::string& name, StreamWriter write, std::function<void(const std::string& path)> read,
                    std::function<StreamWriter()> capture = {});

  // Restores the tracked state and the CPU RNG from HYDRO_RESUME_FROM, else from the newest
  // valid checkpoint in HYDRO_CKPT_DIR. Returns the step to continue from (0 on a fresh start).
  // A checkpoint of another number of ranks is refused, unless allow_reshard() was called.
  int64_t resume();
  // The tracked state can resume on another number of ranks than the checkpoint's (the Python
  // binding's sharded items: each reads every rank's file and takes what this rank holds now).
  // Each rank's other files are then those of rank (rank mod the checkpoint's ranks).
  void allow_reshard() { reshard_ = true; }
  // Every checkpoint then holds DCP's index of the sharded state, at its top: torch.distributed.
  // checkpoint loads it (the Python binding's sharded items; CheckpointWriter::compose_dcp_metadata).
  void compose_dcp_metadata(Composer compose) { dcp_metadata_ = std::move(compose); }
  // HYDRO_CKPT_MODE=async with several ranks, for state that is each rank's own (the Python
  // binding's sharded items): every rank writes its own shard, and the ranks commit them as one
  // checkpoint, as in the sync modes, on the background thread. The ranks then vote at each step's
  // end, through the store, on when to checkpoint. Every rank calls it, before resume(); it joins the
  // ranks' store. Nothing in other modes, with one rank, or without HYDRO_CKPT_DIR.
  void every_rank_writes();

  // Call after each step with the number of steps done. Blocks here if a pause is pending and
  // no operator ran; checkpoints every HYDRO_CKPT_EVERY steps. Returns false after committing a
  // checkpoint because SIGTERM (checkpoint_exit) arrived: the caller exits with kExitRequeue.
  bool step_end(int64_t step);
  // The process groups' timeout, which hydro watches in torch's place (they get one no hold can
  // reach: hydro.groups in Python). From now on, a rank that ends no step in this much running
  // time, held time left out (hydro/hang_watch.h), is hung: it is ended as hydro-launch's watchdog
  // ends one (requeued or restarted), or exits kExitWatchdog without a watchdog FIFO. A second call
  // replaces the first; 0 stops watching.
  void watch_collectives(std::chrono::milliseconds timeout);

  // Commits a checkpoint of the tracked state now (in async mode: starts it). Returns its directory
  // ("" on ranks that write nothing). `keep_always` (force_save): HYDRO_KEEP_LAST never removes it.
  // In sync modes with several ranks, every rank must call it for the same step.
  std::string save(int64_t step, bool keep_always = false);
  // True on a rank that writes checkpoints, when HYDRO_CKPT_DIR is set.
  bool writes_checkpoints() const;

  // The epoch recorded in the next checkpoint's manifest; resume() restores it.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Waits for background work that save() left running (an async write, removing old
  // checkpoints). Throws if an async write failed.
  void wait_idle();

  // HYDRO_ASYNC_COPY=behind, for a caller that waits for the copies (wait_copies()) before the
  // tracked tensors change (the binding does before every optimizer step): from then on, an async
  // save() returns once the state is captured, its copies still running on the helper thread.
  void copy_behind() { copy_behind_ = settings_.copy_behind && settings_.mode == CheckpointMode::async; }
  // Returns once the last async save's copies are made (at once when none is pending, and in a
  // child forked meanwhile: it has no helper thread to make them, and never writes them).
  void wait_copies();

  const Settings& settings() const { return settings_; }

 private:
  struct StepEndPlan;
  void time_last_step();
  StepEndPlan suspend_at_step_end(int64_t step);
  void decide_checkpoint(int64_t step, StepEndPlan* plan);
  void exit_checkpoint(int64_t step);
  void checkpoint_at(int64_t step, const StepEndPlan& plan);
  static void pause_at_end_of(int64_t step);
  void add(TrackedItem t);
  struct AsyncSave;
  std::string save_async(int64_t step, bool keep_always);
  Status persist_alone(const AsyncSave& save);
  Status persist_in_group(const AsyncSave& save, CheckpointGroup* saver);
  std::string save_in_step(int64_t step, bool keep_always);
  void finish_async(int64_t step, const Status& st);
  void finish_copies(AsyncSave& save, std::promise<void>& copied);
  void open_group();
  void start_pruner();
  std::string load_path(const std::string& checkpoint, const Manifest& manifest, const std::string& file) const;
  bool grouped() const { return group_ != nullptr; }
  void update_suspend_budget();
  std::string save_tolerated(int64_t step);
  bool suspend_checkpoint_fits(const std::string& why_not) const;
  std::string suspend_checkpoint_why_not() const;
  Settings settings_;
  Fs& fs_;
  std::vector<TrackedItem> tracked_;  // in the order of track(); rng.pt is written after them
  // For HYDRO_SUSPEND_CHECKPOINT: how long the last step and the last checkpoint took.
  std::chrono::steady_clock::time_point last_step_end_{};
  double last_step_s_ = -1, last_save_s_ = -1;
  int64_t epoch_ = 0;
  int failed_in_a_row_ = 0;                              // checkpoints of step_end that failed since one committed
  std::chrono::steady_clock::time_point first_failure_;  // the first of those
  std::atomic<bool> async_committed_{false};             // an async write committed since step_end last looked
  std::unique_ptr<TcpStoreServer> store_server_;         // rank 0's; outlives store_
  std::unique_ptr<RankStore> store_;
  std::unique_ptr<CheckpointGroup> group_;  // sync modes with several ranks; async after every_rank_writes()
  std::unique_ptr<RankStore> save_store_;   // every_rank_writes(): the async saves' own connection,
  std::unique_ptr<CheckpointGroup> saver_;  // and their group, used on the background thread only
  std::unique_ptr<TensorPool> pool_;        // host copies, reused: async saves', device tensors'
  BackgroundJob persist_;                   // async mode: the write in flight
  bool copy_behind_ = false;                // copy_behind(): save() leaves the copies running
  std::shared_future<void> copies_;         // and they are made when this is ready
  std::atomic<pid_t> copies_pid_{0};        // the process that saved (copies_ is its)
  std::mutex copies_mu_;                    // guards copies_
  std::string persist_error_;
  // The checkpoint resume() loaded (its name). In async mode with several ranks, rank 0 never
  // prunes it in this run: the others may still be reading it, and no vote holds rank 0 back.
  std::string resumed_name_;
  bool resumed_ = false;   // resume() ran
  bool reshard_ = false;   // allow_reshard()
  Composer dcp_metadata_;  // compose_dcp_metadata()
  // Deleting old checkpoints (HYDRO_KEEP_LAST) runs here after save() returns, so training goes on
  // meanwhile; the next save() waits for it, so it never races a commit.
  BackgroundJob pruner_;
  std::unique_ptr<OperatorHeartbeat> heartbeat_;  // watch_collectives(): asked by hang_watch_, outlives it
  std::unique_ptr<HangWatch> hang_watch_;         // watch_collectives()
};

// atomic_save: torch::save(value, path) made atomic and durable. The archive is streamed to
// a temporary file beside `path`, fsynced, renamed over `path`, and the directory fsynced, so
// `path` always holds the old file or the whole new one. torch::load reads it. Throws
// std::runtime_error naming the path on failure (the old file is then untouched).
void atomic_save_archive(torch::serialize::OutputArchive& archive, const std::string& path);
template <typename Value>
void atomic_save(const Value& value, const std::string& path) {
  torch::serialize::OutputArchive archive(std::make_shared<torch::jit::CompilationUnit>());
  archive << value;
  atomic_save_archive(archive, path);
}

// dst.copy_(src) into a snapshot's reused buffer. Inside an async save's capture on this thread (the
// Python binding's snapshots) a large host copy is queued: a helper thread shares it, and save()
// returns once it is done. Anywhere else it copies now.
void copy_for_checkpoint(const torch::Tensor& dst, const torch::Tensor& src);
// Host memory for a snapshot's reused copy of `src`, a device tensor, inside a save's capture on
// this thread: pinned where it fits (issue 58). Undefined for any other tensor, or elsewhere.
torch::Tensor checkpoint_buffer(const torch::Tensor& src);
// A resume's device tensors through pinned slots (issue 58), for the Python binding's loads, which
// Runtime::resume calls: whether this thread is inside such a resume (a device in this process);
// host memory for the copy of `dst`, a contiguous device tensor the pool takes, pinned where it
// fits (undefined for any other tensor, or elsewhere); dst <- src through `slot`, a restore_buffer
// of dst's: src's bytes copied into it now, the device copy queued (false, and nothing done, for
// any other three); and the wait for the copies queued so far, which throws a copy's error.
bool restores_through_pool();
torch::Tensor restore_buffer(const torch::Tensor& dst);
bool restore_through(const torch::Tensor& slot, const torch::Tensor& dst, const torch::Tensor& src);
void wait_restores();

// Pausing without a Runtime, for a program that was not changed (the Python hook that
// --hydro-pause=on loads when torch is imported): installs the handlers of HYDRO_SIGNALS' pause and
// resume signals and the operator callback, and nothing else; SIGTERM keeps its default action,
// as there is no state to checkpoint. A Runtime created later replaces them. Returns false, and
// installs nothing, when HYDRO_PAUSE is off. Throws as Runtime() does on bad settings.
bool start_pause_only();

// Arms the operator pause now, on the calling thread, if a pause by signal `signo` is pending and
// would arm it: what the handlers' watcher thread does, without waiting for that thread to be
// scheduled. Python's interpreter calls it on the main thread at its next bytecode (hydro/_pause.py).
void arm_pause_now(int signo);
// The signals the environment's settings (HYDRO_SIGNALS) map to a pause; none when HYDRO_PAUSE is
// off. Throws as Runtime() does on bad settings.
std::vector<int> pause_signals_from_env();

// True while the operator callback is enabled: a pause is pending and the next operator on any
// thread will block. (For tests and diagnostics.)
bool operator_pause_armed();

// True when this libtorch has CUDA and a device: a pausing thread then synchronizes the device
// before it blocks, so no kernel is in flight when the job is frozen.
bool drains_cuda_on_pause();

// True when, in addition, a pausing thread gives device memory back to the driver
// (HYDRO_GPU_RELEASE=cache or full, and hydro built against a libtorch with CUDA).
bool releases_cuda_cache_on_pause();

// A process group the program made, by its name (torch's group registry; the Python package tells
// each one it creates): with HYDRO_GPU_RELEASE=full its NCCL communicators are suspended around
// the move (ncclCommSuspend: NCCL 2.29.7 and torch 2.15 or later; an older torch releases the cache
// only, and says why).
void track_process_group(const std::string& name);

}  // namespace hydro
