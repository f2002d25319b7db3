// What the Runtime saves: one file per tracked item, NAME.pt in every checkpoint. Each item knows
// how to stream its file (no in-memory copy of the whole state), how to load it back from a path,
// and, for async checkpoints, how to copy itself now so a background thread can write it later.
// The C++ items (modules, optimizers, samplers, tensors, strings) are torch archives; the Python
// binding's items are streams its own code fills (torch.save of a state_dict()).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "hydro/checkpoint_dir.h"
#include "hydro/status.h"
#include "snapshot.h"

namespace hydro {

struct TrackedItem {
  std::string name;
  std::function<Status(const ByteSink&)> write;
  std::function<void(const std::string& path)> read;
  std::function<Captured(TensorPool&)> capture;
  // Whether capture copies tensor by tensor into the pool (a module, a known optimizer, a tensor,
  // Python's snapshot): only then does a sync save on a device stage it (write_item). Any other
  // capture serializes the whole file into memory, which a sync save streams instead.
  bool stages = false;
};

// "model" and the like: [A-Za-z0-9_-], not "rng" (the Runtime's own file).
bool valid_tracked_name(const std::string& name);

// Streams an archive into `append` as it is serialized; a failed append stops it and is returned.
Status stream_archive(torch::serialize::OutputArchive& archive, const std::string& name, const ByteSink& append);

// An item stored as a torch archive. `capture` defaults to serializing into memory now.
TrackedItem archive_item(const std::string& name, std::function<void(torch::serialize::OutputArchive&)> save,
                         std::function<void(torch::serialize::InputArchive&)> load,
                         std::function<Captured(TensorPool&)> capture = {});

TrackedItem module_item(const std::string& name, torch::nn::Module& module);
TrackedItem optimizer_item(const std::string& name, torch::optim::Optimizer& optimizer);
TrackedItem sampler_item(const std::string& name, torch::data::samplers::Sampler<>& sampler);
TrackedItem tensor_item(const std::string& name, torch::Tensor& tensor);
TrackedItem string_item(const std::string& name, std::string& value);
// An item whose bytes a caller-supplied function streams (Runtime::track_stream).
TrackedItem stream_item(const std::string& name, StreamWriter write, std::function<void(const std::string&)> read,
                        std::function<StreamWriter()> capture);

// rng.pt, the Runtime's own: torch's CPU generator and each CUDA device's (through ATen's CUDA
// hooks, so no CUDA headers are needed). Written after the tracked items, and read after them.
const TrackedItem& rng_item();

// One item's file, NAME.pt, streamed into a checkpoint. Where `pool` stages device tensors (a
// device is there), the item is captured into it first, every device tensor's copy queued at once
// into its pinned slots and waited for (issue 58), and the copy is written: torch's own writer
// would copy each tensor on its turn, into pageable memory.
Status write_item(CheckpointWriter& writer, const TrackedItem& item, TensorPool* pool = nullptr);
// Captured state to a checkpoint file.
Status write_captured(CheckpointWriter& writer, const std::string& file, const Captured& c);

}  // namespace hydro
