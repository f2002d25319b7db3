// Async checkpoints: the training thread copies the tracked state into host buffers that are
// allocated once and reused (fresh memory is slow to touch; see bench/async_bench), and a background
// thread serializes the copies in the same format as the live save (module.load() and
// optimizer.load() read either).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hydro/checkpoint_dir.h"
#include "hydro/staging.h"
#include "hydro/work_share.h"

namespace hydro {

// Issue 58: how a checkpoint's copies of device tensors reach host memory. A CUDA build's
// (cuda_staging.cpp) copy on a stream of hydro's after an event of the tensor's stream; a test's
// stand-in copies CPU tensors it calls device ones. None is taken where `takes` is empty.
struct DeviceCopyCalls {
  std::function<bool()> present;                    // a device this process uses (at a save)
  std::function<bool(const torch::Tensor&)> takes;  // a tensor whose copy these make
  std::function<Status(uint64_t, void**)> pin;      // as StagingCalls'
  std::function<void(void*, uint64_t)> unpin;       // ...
  // dst <- src, one a device tensor and the other its host slot: a save's copy, or a resume's.
  std::function<Status(size_t copy, const torch::Tensor& dst, const torch::Tensor& src)> queue;
  std::function<Status(size_t copy)> wait;  // and then forgets the copy's event
};
// A fresh set of the CUDA build's calls (none elsewhere), or of what a test set.
DeviceCopyCalls device_calls();
DeviceCopyCalls cuda_device_calls();  // cuda_staging.cpp, or cuda_memory_none.cpp's empty set
// For tests only: the calls each TensorPool made from now on uses (empty: the build's again).
void set_device_calls_for_tests(std::function<DeviceCopyCalls()> make);

// The copies of one pool's device tensors: host buffers from hydro/staging.h, each kept as the
// pool's slot (pinned once), and every copy of a save queued at once; finish() waits for them.
class DeviceCopies {
 public:
  explicit DeviceCopies(DeviceCopyCalls calls);
  ~DeviceCopies() { (void)finish(); }
  // A dense tensor the calls take (a sparse one goes torch's own way).
  bool takes(const torch::Tensor& src) const {
    return calls_.takes && src.layout() == torch::kStrided && calls_.takes(src);
  }
  bool present() const { return calls_.takes && calls_.present && calls_.present(); }
  // A CPU tensor of src's shape and dtype, contiguous, over host memory for its copy.
  torch::Tensor buffer_like(const torch::Tensor& src);
  // dst <- src, queued, both held until finish(): a save's (dst host memory, contiguous, of src's
  // shape and dtype) or a resume's (src a host slot, dst a contiguous device tensor of its shape).
  Status queue(const torch::Tensor& dst, const torch::Tensor& src);
  Status finish();

 private:
  DeviceCopyCalls calls_;
  std::mutex mu_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> held_;  // by copy number
  Staging staging_;
};

// Host copies, one per key, reused from one checkpoint to the next. A copy from a device tensor
// goes to DeviceCopies, into a slot of host memory it made (pinned), and finish() waits for it.
// A large copy that is a memcpy
// (host to host, dense) is queued, in chunks, to a work share: a helper thread copies while the
// training thread goes on capturing (pickling, the next item), and finish() returns once every copy
// is done. The memory is read when the chunk is copied, within save(): what one tracked object's
// state_dict() does to another's tensors during save() may show. Any other copy (from a device,
// strided, small, or with more than two intra-op threads, where torch's copy_ uses them all) runs
// at once.
class TensorPool {
 public:
  TensorPool() : device_(device_calls()) {}
  // The pool's copy of `t` under `key`, allocated at the first use and reused.
  torch::Tensor copy(const std::string& key, const torch::Tensor& t);
  // dst.copy_(src), queued like copy()'s (dst is a reused buffer; both memories are held until
  // copied).
  void copy_into(const torch::Tensor& dst, const torch::Tensor& src);
  // Returns once every queued copy is done; rethrows a copy's error.
  void finish();
  size_t bytes() const;
  // Host memory for the copy of `src` where it is a device tensor (pinned: the Python binding's
  // slots); undefined for any other.
  torch::Tensor device_buffer(const torch::Tensor& src);
  // Whether a device's tensors can be here: then a sync save stages too (tracked.h's write_item),
  // and a resume restores through the pool (Restoring).
  bool stages_device_tensors() const { return device_.present(); }

  // Resume: `dst`, a contiguous device tensor, gets `src`'s bytes (a host tensor of its shape and
  // dtype, as the checkpoint held it) through the pool's slot under `key`: pinned, and the slot a
  // save of dst under that key uses next. The device copy is queued; finish() waits for it. False,
  // and nothing done, for any other pair: the caller copies.
  bool restore(const std::string& key, const torch::Tensor& dst, const torch::Tensor& src);
  // The same through `slot`, host memory of the caller's (a device_buffer of dst: the Python
  // binding's slots, which its snapshots keep).
  bool restore_via(const torch::Tensor& slot, const torch::Tensor& dst, const torch::Tensor& src);
  // The same into a new tensor on `device`; undefined where the pool does not take it.
  torch::Tensor restore_to(const std::string& key, const torch::Tensor& src, torch::Device device);

  // While one lives, restoring() on this thread is `pool`: Runtime::resume's loads restore their
  // device tensors through it.
  class Restoring {
   public:
    explicit Restoring(TensorPool& pool);
    ~Restoring();

   private:
    TensorPool* outer_;
  };
  static TensorPool* restoring();

  // While one lives, copy_for_checkpoint() on this thread queues to `pool`; it ends with every
  // copy done (finish(), whose errors it drops if nobody called it first).
  class Capturing {
   public:
    explicit Capturing(TensorPool& pool);
    ~Capturing();
    void finish();
    // Ends the capture without waiting: the queued copies run on, until the pool's finish().
    void leave() { finished_ = true; }

   private:
    TensorPool& pool_;
    TensorPool* outer_;
    bool finished_ = false;
  };
  static TensorPool* capturing();

 private:
  std::unordered_map<std::string, torch::Tensor> slots_;
  WorkShare share_;
  DeviceCopies device_;
};

// A tensor's slot in a pool: NAME under PARENT (a module's tensors and children, an optimizer
// state's tensors), as a save's copy and a resume's restore both name it.
inline std::string slot_key(const std::string& parent, const std::string& name) { return parent + "/" + name; }
// Each parameter and buffer of `module`, the tree included, with its slot under `key` (a module
// tracked as `key`).
void for_each_module_slot(const std::string& key, const torch::nn::Module& module,
                          const std::function<void(const std::string& slot, const torch::Tensor&)>& f);
// The slot of one parameter's optimizer state, in an optimizer tracked as `key`: libtorch 1.x keys
// the state by the parameter's address as text, 2.x by the address itself.
template <typename Key>
std::string optimizer_state_slot(const std::string& key, const Key& k) {
  if constexpr (std::is_pointer_v<Key>) {
    return slot_key(key, std::to_string(reinterpret_cast<std::uintptr_t>(k)));
  } else {
    return slot_key(key, k);
  }
}

// A tracked item as captured: an archive writer over copies, the serialized bytes, or a stream
// writer over copies (the Python binding's). Exactly one is set; each runs on the background thread.
struct Captured {
  std::function<void(torch::serialize::OutputArchive&)> write;
  std::shared_ptr<std::string> bytes;
  StreamWriter stream;
};

// Replaces each tensor of one parameter's optimizer state (SGD, Adam, AdamW, RMSprop, Adagrad:
// an undefined one too, as a state without max_exp_avg_sq has) with f(its name, it). False, and
// nothing done, for any other kind of state.
using StateTensorFn = std::function<torch::Tensor(const std::string& name, const torch::Tensor& t)>;
bool for_each_state_tensor(torch::optim::OptimizerParamState& s, const StateTensorFn& f);

Captured capture_module(const std::string& key, const torch::nn::Module& module, TensorPool& pool);
// SGD, Adam, AdamW, RMSprop and Adagrad are copied tensor by tensor; other optimizers are
// serialized to memory on the calling thread.
bool copies_state_by_tensor(const torch::optim::Optimizer& optimizer);  // those above
Captured capture_optimizer(const std::string& key, torch::optim::Optimizer& optimizer, TensorPool& pool);
// Serializes `save` into memory now (the fallback for anything else).
Captured capture_bytes(const std::function<void(torch::serialize::OutputArchive&)>& save);

}  // namespace hydro
