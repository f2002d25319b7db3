// Samplers that remember where an epoch stands, so a job resumed from a checkpoint continues at
// the next sample (Runtime::track(name, sampler)), for torch::data::make_data_loader.
//
//   hydro::InterruptibleDistributedSampler sampler(dataset.size().value(), world, rank, /*seed=*/0);
//   auto loader = torch::data::make_data_loader(dataset, sampler, options.workers(0));  // shares state
//   hydro.track("sampler", sampler);
//   hydro.resume();
//   for (int64_t epoch = sampler.epoch(); epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);                 // the same epoch again: keeps the resumed position
//     for (auto& batch : *loader) { ... }
//   }
//
// The order is PyTorch's torch.utils.data.DistributedSampler exactly: with shuffle,
// torch.randperm(n, generator=g) with g.manual_seed(seed + epoch), so every epoch has a new
// shuffle; without, 0..n-1; then padding or drop_last and rank striding (hydro/sampler_order.h).
//
// Position. The sampler counts the samples it hands out (next()); `consumed` = the samples all
// ranks took this epoch. With auto_advance off, next() only reads ahead and the training loop
// calls advance(n) for the n samples it has trained on: then the saved position is exact even
// when data-loader workers prefetch batches. With auto_advance on (the default), resumption is
// exact with workers = 0; with workers > 0 the loader has asked for up to max_jobs batches more
// than were trained on, and a resumed job skips them (it never repeats a sample).
//
// Copies share one state (the data loader keeps a copy), so the sampler passed to
// Runtime::track and the one inside the loader are at the same position.
//
// reset() (the data loader calls it at every begin()): rewinds the read-ahead to the saved
// position, and when this rank's epoch is finished, starts the next epoch. reset(size) with a
// different size restarts the epoch over the new size.
//
// save()/load(): epoch, consumed, seed, dataset size, world size, shuffle, drop_last. Loading
// with a different world size continues the epoch by the rule in hydro/sampler_order.h (no
// sample lost or repeated, but for padding); a different dataset size, seed, shuffle or
// drop_last throws std::runtime_error naming the setting and both values.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace hydro {

struct SamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  bool auto_advance = true;
};

// What a checkpoint records of a sampler (save()/load() write and read exactly these).
struct SamplerPosition {
  int64_t epoch = 0;
  int64_t consumed = 0;  // samples all ranks took this epoch
  uint64_t seed = 0;
  int64_t size = 0;
  int64_t num_replicas = 1;
  bool shuffle = true;
  bool drop_last = false;
};

class InterruptibleDistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  // Throws std::runtime_error on num_replicas < 1 or rank outside [0, num_replicas).
  InterruptibleDistributedSampler(size_t size, SamplerOptions options);
  InterruptibleDistributedSampler(size_t size, int64_t num_replicas, int64_t rank, uint64_t seed = 0,
                                  bool shuffle = true, bool drop_last = false);
  // Copies share the state; a moved-from sampler still works (moving copies).
  InterruptibleDistributedSampler(const InterruptibleDistributedSampler&) = default;
  InterruptibleDistributedSampler& operator=(const InterruptibleDistributedSampler&) = default;

  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // Moves to epoch `epoch` at its start; the current epoch keeps its position.
  void set_epoch(int64_t epoch);
  void next_epoch();
  // Back to the start of the current epoch.
  void rewind();
  // Records that this rank trained on n more samples (with auto_advance off; with it on, skips
  // n samples). Throws when fewer than n are left in the epoch.
  void advance(size_t n);

  // The position save() records, and restoring it (load() without an archive; throws as load() does).
  SamplerPosition position() const;
  void restore(const SamplerPosition& saved);
  // Off: next() only reads ahead, and advance(n) records what was trained on (the Python
  // DataLoader counts the batches its loop took).
  void set_auto_advance(bool on) { options_.auto_advance = on; }

  int64_t epoch() const;
  // Samples all ranks took this epoch (this rank's count times the world size, from the start
  // of the epoch or of the resumed part).
  int64_t consumed() const;
  // This rank's samples left in the epoch after the advanced position.
  size_t remaining() const;
  // This rank's indices for the whole epoch as laid out now (the resumed part after a load).
  std::vector<size_t> epoch_indices() const;
  const SamplerOptions& options() const { return options_; }
  size_t size() const;

 private:
  struct State;
  SamplerOptions options_;
  std::shared_ptr<State> state_;
};

// One rank: a new shuffle of 0..size-1 every epoch (torch.randperm with seed + epoch), or 0..size-1
// in order without shuffle. The same as the distributed sampler with num_replicas = 1.
class InterruptibleSampler : public InterruptibleDistributedSampler {
 public:
  explicit InterruptibleSampler(size_t size, uint64_t seed = 0, bool shuffle = true, bool auto_advance = true);
};

}  // namespace hydro
