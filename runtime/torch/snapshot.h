// Async checkpoints: the training thread copies the tracked state into host buffers that are
// allocated once and reused (fresh memory is slow to touch; see bench/async_bench), and a background
// thread serializes the copies in the same format as the live save (module.load() and
// optimizer.load() read either).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "hydro/checkpoint_dir.h"
#include "hydro/work_share.h"

namespace hydro {

// Host copies, one per key, reused from one checkpoint to the next. A large copy that is a memcpy
// (host to host, dense) is queued, in chunks, to a work share: a helper thread copies while the
// training thread goes on capturing (pickling, the next item), and finish() returns once every copy
// is done. The memory is read when the chunk is copied, within save(): what one tracked object's
// state_dict() does to another's tensors during save() may show. Any other copy (from a device,
// strided, small, or with more than two intra-op threads, where torch's copy_ uses them all) runs
// at once.
class TensorPool {
 public:
  // The pool's copy of `t` under `key`, allocated at the first use and reused.
  torch::Tensor copy(const std::string& key, const torch::Tensor& t);
  // dst.copy_(src), queued like copy()'s (dst is a reused buffer; both memories are held until
  // copied).
  void copy_into(const torch::Tensor& dst, const torch::Tensor& src);
  // Returns once every queued copy is done; rethrows a copy's error.
  void finish() { share_.finish(); }
  size_t bytes() const;

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
};

// A tracked item as captured: an archive writer over copies, the serialized bytes, or a stream
// writer over copies (the Python binding's). Exactly one is set; each runs on the background thread.
struct Captured {
  std::function<void(torch::serialize::OutputArchive&)> write;
  std::shared_ptr<std::string> bytes;
  StreamWriter stream;
};

Captured capture_module(const std::string& key, const torch::nn::Module& module, TensorPool& pool);
// SGD, Adam, AdamW, RMSprop and Adagrad are copied tensor by tensor; other optimizers are
// serialized to memory on the calling thread.
Captured capture_optimizer(const std::string& key, torch::optim::Optimizer& optimizer, TensorPool& pool);
// Serializes `save` into memory now (the fallback for anything else).
Captured capture_bytes(const std::function<void(torch::serialize::OutputArchive&)>& save);

}  // namespace hydro
