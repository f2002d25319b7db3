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

namespace hydro {

// Host copies, one per key, reused from one checkpoint to the next.
class TensorPool {
 public:
  torch::Tensor copy(const std::string& key, const torch::Tensor& t);
  size_t bytes() const;

 private:
  std::unordered_map<std::string, torch::Tensor> slots_;
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
