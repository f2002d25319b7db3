#include "hydro/sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <stdexcept>

#include "hydro/sampler_order.h"
#include "raise.h"

namespace hydro {
namespace {

[[noreturn]] void sampler_fail(const std::string& what) { throw std::runtime_error("hydro: sampler: " + what); }

void check(const Status& s) { throw_if_error(s); }

// The epoch's order before padding and striding: torch.randperm(n, generator=g) with
// g.manual_seed(seed + epoch), as torch.utils.data.DistributedSampler makes it, or 0..n-1.
std::vector<int64_t> epoch_order(size_t n, const SamplerOptions& o, int64_t epoch) {
  std::vector<int64_t> perm(n);
  if (!o.shuffle || n == 0) {
    std::iota(perm.begin(), perm.end(), 0);
    return perm;
  }
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(o.seed + static_cast<uint64_t>(epoch));
  torch::Tensor t = torch::randperm(static_cast<int64_t>(n), g, torch::kLong);
  std::copy(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n, perm.begin());
  return perm;
}

// Archive keys.
constexpr const char* kKeys[] = {"epoch", "consumed", "seed", "size", "num_replicas", "shuffle", "drop_last"};

}  // namespace

struct InterruptibleDistributedSampler::State {
  std::mutex mu;
  size_t size = 0;
  int64_t epoch = 0;
  int64_t start = 0;        // samples all ranks took this epoch before `order` was laid out
  int64_t start_world = 1;  // the ranks that took them
  bool laid_out = false;
  std::vector<int64_t> order;  // this rank's indices for the epoch from `start` on
  size_t taken = 0;            // of `order`: advanced (what a checkpoint records)
  size_t read = 0;             // of `order`: handed out by next()

  void restart(int64_t world) {
    start = 0;
    start_world = world;
    laid_out = false;
    order.clear();
    taken = read = 0;
  }
  void lay_out(const SamplerOptions& o) {
    if (laid_out) return;
    check(sampler_resume_order(epoch_order(size, o, epoch), start, start_world, o.num_replicas, o.rank, o.drop_last,
                               &order));
    laid_out = true;
  }
};

InterruptibleDistributedSampler::InterruptibleDistributedSampler(size_t size, SamplerOptions options)
    : options_(options), state_(std::make_shared<State>()) {
  std::vector<int64_t> none;
  check(sampler_rank_order(none, options_.num_replicas, options_.rank, options_.drop_last, &none));
  state_->size = size;
  state_->restart(options_.num_replicas);
}

InterruptibleDistributedSampler::InterruptibleDistributedSampler(size_t size, int64_t num_replicas, int64_t rank,
                                                                 uint64_t seed, bool shuffle, bool drop_last)
    : InterruptibleDistributedSampler(size, SamplerOptions{num_replicas, rank, seed, shuffle, drop_last, true}) {}

void InterruptibleDistributedSampler::reset(torch::optional<size_t> new_size) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (new_size && *new_size != s.size) {
    s.size = *new_size;
    s.restart(options_.num_replicas);
    return;
  }
  s.lay_out(options_);
  if (!s.order.empty() && s.taken >= s.order.size()) {  // this rank's epoch is over: the next one
    s.epoch++;
    s.restart(options_.num_replicas);
  } else {
    s.read = s.taken;
  }
}

torch::optional<std::vector<size_t>> InterruptibleDistributedSampler::next(size_t batch_size) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.lay_out(options_);
  if (s.read >= s.order.size()) return torch::nullopt;
  const size_t k = std::min(batch_size, s.order.size() - s.read);
  std::vector<size_t> batch(s.order.begin() + static_cast<long>(s.read),
                            s.order.begin() + static_cast<long>(s.read + k));
  s.read += k;
  if (options_.auto_advance) s.taken = std::max(s.taken, s.read);
  return batch;
}

void InterruptibleDistributedSampler::advance(size_t n) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.lay_out(options_);
  if (n > s.order.size() - s.taken)
    sampler_fail("advance(" + std::to_string(n) + ") goes past the end of epoch " + std::to_string(s.epoch) + ": " +
                 std::to_string(s.order.size() - s.taken) + " of this rank's samples are left");
  s.taken += n;
  s.read = std::max(s.read, s.taken);
}

void InterruptibleDistributedSampler::set_epoch(int64_t epoch) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (epoch == state_->epoch) return;
  state_->epoch = epoch;
  state_->restart(options_.num_replicas);
}

void InterruptibleDistributedSampler::next_epoch() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->epoch++;
  state_->restart(options_.num_replicas);
}

void InterruptibleDistributedSampler::rewind() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->restart(options_.num_replicas);
}

int64_t InterruptibleDistributedSampler::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->epoch;
}

int64_t InterruptibleDistributedSampler::consumed() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->start + static_cast<int64_t>(state_->taken) * options_.num_replicas;
}

size_t InterruptibleDistributedSampler::remaining() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->lay_out(options_);
  return state_->order.size() - state_->taken;
}

std::vector<size_t> InterruptibleDistributedSampler::epoch_indices() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->lay_out(options_);
  return std::vector<size_t>(state_->order.begin(), state_->order.end());
}

size_t InterruptibleDistributedSampler::size() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->size;
}

SamplerPosition InterruptibleDistributedSampler::position() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  const State& s = *state_;
  return {s.epoch,
          s.start + static_cast<int64_t>(s.taken) * options_.num_replicas,
          options_.seed,
          static_cast<int64_t>(s.size),
          options_.num_replicas,
          options_.shuffle,
          options_.drop_last};
}

void InterruptibleDistributedSampler::restore(const SamplerPosition& saved) {
  auto differs = [](const std::string& what, const std::string& was, const std::string& now) {
    sampler_fail("the checkpoint's " + what + " " + was + " differs from this sampler's " + now +
                 ": resume with the same " + what);
  };
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  if (saved.size < 0 || static_cast<uint64_t>(saved.size) != s.size)
    differs("dataset size", std::to_string(saved.size), std::to_string(s.size));
  if (saved.seed != options_.seed) differs("seed", std::to_string(saved.seed), std::to_string(options_.seed));
  if (saved.shuffle != options_.shuffle) differs("shuffle", flag(saved.shuffle), flag(options_.shuffle));
  if (saved.drop_last != options_.drop_last) differs("drop_last", flag(saved.drop_last), flag(options_.drop_last));
  State next;
  next.size = s.size;
  next.epoch = saved.epoch;
  next.start = saved.consumed;
  next.start_world = saved.num_replicas;
  next.lay_out(options_);  // validates consumed and the saved world size
  s.epoch = saved.epoch;
  s.start = saved.consumed;
  s.start_world = saved.num_replicas;
  s.order = std::move(next.order);
  s.laid_out = true;
  s.taken = s.read = 0;
}

void InterruptibleDistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  const SamplerPosition p = position();
  const int64_t values[] = {p.epoch,   p.consumed, static_cast<int64_t>(p.seed), p.size, p.num_replicas,
                            p.shuffle, p.drop_last};
  for (size_t i = 0; i < std::size(kKeys); ++i) archive.write(kKeys[i], torch::tensor(values[i], torch::kLong));
}

void InterruptibleDistributedSampler::load(torch::serialize::InputArchive& archive) {
  int64_t v[std::size(kKeys)];
  for (size_t i = 0; i < std::size(kKeys); ++i) {
    torch::Tensor t;
    if (!archive.try_read(kKeys[i], t) || t.numel() != 1)
      sampler_fail(std::string("the checkpoint holds no interruptible sampler state ('") + kKeys[i] +
                   "' is missing): was it saved by another kind of sampler?");
    v[i] = t.item<int64_t>();
  }
  restore({v[0], v[1], static_cast<uint64_t>(v[2]), v[3], v[4], v[5] != 0, v[6] != 0});
}

InterruptibleSampler::InterruptibleSampler(size_t size, uint64_t seed, bool shuffle, bool auto_advance)
    : InterruptibleDistributedSampler(size, SamplerOptions{1, 0, seed, shuffle, false, auto_advance}) {}

}  // namespace hydro
