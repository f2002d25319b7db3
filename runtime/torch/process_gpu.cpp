#include "process_gpu.h"

#if __has_include(<torch/csrc/distributed/c10d/GroupRegistry.hpp>)
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#define HYDRO_HAS_GROUP_REGISTRY 1
#endif
#include <torch/version.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "cuda_memory.h"
#include "hydro/cuda_checkpoint.h"
#include "hydro/device_move.h"
#include "hydro/exit_codes.h"
#include "hydro/host_memory.h"
#include "hydro/log.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"
#include "hydro/setting_schema.h"
#include "hydro/text.h"

namespace hydro {
namespace {

using std::chrono::milliseconds;

// A CUDA context's own device memory (its kernels, stacks, cuBLAS workspace), which the allocator
// does not count: an estimate, so that the host has room for it too.
constexpr uint64_t kContextBytes = 512ull << 20;
// How long the driver's lock may wait for CUDA calls in flight on other threads when no freeze is
// coming (hydroctl pause); before a freeze, GpuReleaser shortens it.
constexpr milliseconds kLockTimeout{5000};

// "HYDRO_GPU_ALLOCATOR=hydro", as the log names it.
std::string hydro_allocator_setting() { return std::string(env_name(Setting::gpu_allocator)) + "=hydro"; }

Status failed(const std::string& what, const std::exception& e) {
  return Status::io(what + ": " + first_line(e.what()));
}

// An NCCL communicator suspended (ncclCommSuspend) for a full release: torch 2.15's
// Backend::suspend(). An older torch has none, and a release with NCCL groups falls back.
template <typename B>
auto suspend_backend(B& b, int) -> decltype(b.suspend(), Status()) {
  try {
    b.suspend();
    return Status::OK();
  } catch (const std::exception& e) {
    return failed("ProcessGroupNCCL::suspend", e);
  }
}
template <typename B>
Status suspend_backend(B&, long) {
  return Status::io("this torch (" TORCH_VERSION ") cannot suspend an NCCL communicator: torch 2.15 or later");
}
template <typename B>
auto resume_backend(B& b, int) -> decltype(b.resume(), Status()) {
  try {
    b.resume();
    return Status::OK();
  } catch (const std::exception& e) {
    return failed("ProcessGroupNCCL::resume", e);
  }
}
template <typename B>
Status resume_backend(B&, long) {
  return Status::OK();
}

class ProcessGpu {
 public:
  static ProcessGpu& instance() {
    static ProcessGpu* p = new ProcessGpu;  // never destroyed: a late pause may still use it
    return *p;
  }

  void start(GpuRelease asked, bool cuda, bool hydro_allocator) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (hydro_allocator && !own_) {
      if (asked == GpuRelease::full && cuda)
        route_to_own();
      else
        log("warning: " + hydro_allocator_setting() + " has no effect without " + env_name(Setting::gpu_release) +
            "=full and a CUDA device");
    }
    mode_ = effective(asked, cuda);
    releaser_ = std::make_unique<GpuReleaser>(mode_, calls(), [](const std::string& line) { log(line); });
  }

  // The pinned pool grown before a pause needs it, to every byte mapped (a pause inside a step
  // finds more of it in use than a step's end does). A size that failed is not tried again until
  // the device holds more; the pause pins what it needs then.
  void prepare() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!own_ || handled_ || mode_ != GpuRelease::full) return;
    const uint64_t bytes = own_->mapped_bytes();
    if (bytes <= own_->pool().capacity() || bytes <= prepare_failed_at_) return;
    Status s = own_->prepare(bytes);
    if (s.ok()) return;
    prepare_failed_at_ = bytes;
    log("warning: " + hydro_allocator_setting() + ": pinning host memory for a pause failed (" + s.message() +
        "): a pause pins what it needs then");
  }

  GpuRelease mode() {
    std::lock_guard<std::mutex> lock(mutex_);
    return mode_;
  }

  std::string release(const std::vector<int>& devices, std::optional<milliseconds> until_freeze) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Once a pause: the first thread to pause releases; a thread whose drain returned only after
    // the resume (the driver held its call) releases nothing.
    if (!releaser_ || handled_ || !PauseGate::instance().pause_pending()) return "";
    handled_ = true;
    devices_ = devices;
    switch (releaser_->release(kLockTimeout, until_freeze)) {
      case GpuRelease::full: return ", device state moved to host memory";
      case GpuRelease::cache: return ", cached memory released";
      case GpuRelease::off: break;
    }
    return "";
  }

  void restore() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!handled_) return;
    handled_ = false;
    const Status s = releaser_->restore();
    if (s.ok()) return;
    log(s.message() + ": the process ends (exit " + std::to_string(kExitRequeue) +
        ") so that hydro-launch requeues the job from its last checkpoint");
    std::_Exit(kExitRequeue);  // no atexit handler: they could call into the lost CUDA state
  }

  void track(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    groups_.push_back(name);
  }

 private:
  // HYDRO_GPU_ALLOCATOR=hydro: libtorch's allocations on the current device from now on are
  // hydro's segments, which its own move takes; or libtorch's own allocator stays, said why.
  void route_to_own() {
    const std::string setting = hydro_allocator_setting();
    MoveCalls move;
    int device = 0;
    Status s = route_cuda_allocations(&move, &device);
    if (!s.ok()) {
      log("warning: " + setting + " has no effect: " + s.message() + "; libtorch's own allocator stays");
      return;
    }
    own_ = std::make_unique<DeviceMove>(std::move(move), [](const std::string& line) { log(line); });
    log(setting + ": libtorch's allocations on CUDA device " + std::to_string(device) +
        " go to hydro's allocator, which a pause moves to host memory itself");
  }

  GpuRelease effective(GpuRelease asked, bool cuda) {
    const std::string setting = std::string("HYDRO_GPU_RELEASE=") + gpu_release_name(asked);
    if (asked == GpuRelease::off) return asked;
    if (!cuda || !cuda_cache_release_compiled()) {
      log("warning: " + setting + " has no effect: " +
          (!cuda_cache_release_compiled() ? "hydro was built against a libtorch without CUDA"
                                          : "no CUDA device is visible"));
      return GpuRelease::off;
    }
    if (asked != GpuRelease::full) return asked;
    const std::string helper = find_cuda_checkpoint_helper();
    Status s = helper.empty() ? Status::not_found(
                                    "no hydro-cuda-checkpoint beside libhydro or in the install's "
                                    "libexec/hydro (hydro was built without the CUDA toolkit)")
                              : CudaCheckpointHelper::start(helper, 0, "", &helper_);
    if (s.ok()) return asked;
    if (own_) {
      log("warning: " + setting + " moves hydro's allocator's memory only: " + s.message());
      return asked;
    }
    log("warning: " + setting + " releases the cache only: " + s.message());
    return GpuRelease::cache;
  }

  DeviceCalls calls() {
    DeviceCalls c;
    c.device_bytes = [this] {
      uint64_t bytes = 0;
      for (int d : devices_) bytes += cuda_reserved_bytes(d) + kContextBytes;
      return bytes;
    };
    c.host_available = [] { return host_memory_available(); };
    c.release_cache = [] {
      release_cuda_cache();
      return Status::OK();
    };
    c.suspend_collectives = [this] { return suspend_groups(); };
    c.resume_collectives = [this] { return resume_groups(); };
    c.own_move = own_.get();
    if (!helper_) return c;  // hydro's own move alone: no driver checkpoint follows a failed one
    c.lock = [this](milliseconds timeout) { return helper_->lock(timeout); };
    c.checkpoint = [this] { return helper_->checkpoint(); };
    c.restore = [this] { return helper_->restore(); };
    c.unlock = [this] { return helper_->unlock(); };
    return c;
  }

  Status suspend_groups() {
#ifdef HYDRO_HAS_GROUP_REGISTRY
    for (const auto& name : groups_) {
      c10::intrusive_ptr<c10d::Backend> nccl;
      try {
        auto group = c10d::resolve_process_group(name);  // throws for a group destroyed since
        if (!group->hasBackends()) continue;
        nccl = group->getBackend(c10::DeviceType::CUDA);  // throws for a group with no CUDA backend
      } catch (const std::exception&) {
        continue;
      }
      if (!nccl || nccl->getBackendName() != "nccl") continue;
      Status s = suspend_backend(*nccl, 0);
      if (!s.ok()) {
        resume_groups();
        return Status::io("process group '" + name + "': " + s.message());
      }
      suspended_.push_back(nccl);
    }
#endif
    return Status::OK();
  }

  Status resume_groups() {
    Status first;
#ifdef HYDRO_HAS_GROUP_REGISTRY
    for (auto& backend : suspended_) {
      Status s = resume_backend(*backend, 0);
      if (!s.ok() && first.ok()) first = s;
    }
    suspended_.clear();
#endif
    return first;
  }

  std::mutex mutex_;
  GpuRelease mode_ = GpuRelease::off;
  std::unique_ptr<GpuReleaser> releaser_;
  std::unique_ptr<CudaCheckpointHelper> helper_;
  std::unique_ptr<DeviceMove> own_;  // HYDRO_GPU_ALLOCATOR=hydro: its segments' move
  uint64_t prepare_failed_at_ = 0;   // the mapped bytes a step end's pinning failed for
  bool handled_ = false;             // this pause's release is done (or was not needed)
  std::vector<int> devices_;         // the devices this process uses, at the pause
  std::vector<std::string> groups_;  // the script's process groups, by name
#ifdef HYDRO_HAS_GROUP_REGISTRY
  std::vector<c10::intrusive_ptr<c10d::Backend>> suspended_;  // NCCL communicators, until resumed
#endif
};

}  // namespace

void gpu_release_start(GpuRelease asked, bool cuda, bool hydro_allocator) {
  ProcessGpu::instance().start(asked, cuda, hydro_allocator);
}
void gpu_prepare_at_step_end() { ProcessGpu::instance().prepare(); }
GpuRelease gpu_release_mode() { return ProcessGpu::instance().mode(); }

std::string gpu_release_at_pause(const std::vector<int>& devices, std::optional<milliseconds> until_freeze) {
  return ProcessGpu::instance().release(devices, until_freeze);
}

void gpu_restore_at_resume() { ProcessGpu::instance().restore(); }

void track_process_group(const std::string& name) { ProcessGpu::instance().track(name); }

}  // namespace hydro
