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
// With CUDA, a pausing thread first waits for the device (torch::cuda::synchronize), and with
// HYDRO_CUDA_RELEASE=on gives the allocator's cached, unused device memory back to the driver.
//
// SIGTERM: the current step finishes, step_end() commits a checkpoint and returns false.
//
// Several ranks (WORLD_SIZE or SLURM_STEP_NUM_TASKS above 1): only rank 0 writes checkpoints, and every
// rank resumes from them. So the tracked state must be the same on every rank, as in data-parallel
// training (hydro/distributed.h); give each rank's data its own generator, not the global one.
//
// Errors throw std::runtime_error whose message names the file or setting.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "hydro/exit_codes.h"
#include "hydro/settings.h"

namespace hydro {

class Runtime {
 public:
  Runtime();  // Settings::from_env()
  explicit Runtime(Settings settings);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // State saved in every checkpoint and restored by resume(). Names are file names: [A-Za-z0-9_-].
  void track(const std::string& name, torch::nn::Module& module);
  void track(const std::string& name, torch::optim::Optimizer& optimizer);
  // User extras: a named tensor (resume() replaces it with the saved one) and a string.
  void track(const std::string& name, torch::Tensor& tensor);
  void track(const std::string& name, std::string& value);

  // Restores the tracked state and the CPU RNG from HYDRO_RESUME_FROM, else from the newest
  // valid checkpoint in HYDRO_CKPT_DIR. Returns the step to continue from (0 on a fresh start).
  int64_t resume();

  // Call after each step with the number of steps done. Blocks here if a pause is pending and
  // no operator ran; checkpoints every HYDRO_CKPT_EVERY steps. Returns false after committing a
  // checkpoint because SIGTERM (checkpoint_exit) arrived: the caller exits with kExitRequeue.
  bool step_end(int64_t step);

  // Commits a checkpoint of the tracked state now. Returns its directory ("" on ranks other
  // than 0, which write nothing). `keep_always` (force_save): HYDRO_KEEP_LAST never removes it.
  std::string save(int64_t step, bool keep_always = false);
  // True on the rank that writes checkpoints, when HYDRO_CKPT_DIR is set.
  bool writes_checkpoints() const;

  // Waits for background work that save() left running (removing old checkpoints).
  void wait_idle();

  const Settings& settings() const { return settings_; }

 private:
  struct Tracked {
    std::string name;
    std::function<void(torch::serialize::OutputArchive&)> save;
    std::function<void(torch::serialize::InputArchive&)> load;
  };
  void add(Tracked t);
  Settings settings_;
  std::vector<Tracked> tracked_;
  // Deleting old checkpoints (HYDRO_KEEP_LAST) runs here after save() returns, so training goes on
  // meanwhile; the next save() waits for it, so it never races a commit.
  std::thread pruner_;
};

// atomic_torch_save: torch::save(value, path) made atomic and durable. The archive is streamed to
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

// True while the operator callback is enabled: a pause is pending and the next operator on any
// thread will block. (For tests and diagnostics.)
bool operator_pause_armed();

// True when this libtorch has CUDA and a device: a pausing thread then synchronizes the device
// before it blocks, so no kernel is in flight when the job is frozen.
bool drains_cuda_on_pause();

// True when, in addition, a pausing thread gives libtorch's cached device memory back to the
// driver (HYDRO_CUDA_RELEASE=on, and hydro built against a libtorch with CUDA).
bool releases_cuda_cache_on_pause();

}  // namespace hydro
