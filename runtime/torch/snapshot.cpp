#include "snapshot.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "hydro/host_memory.h"
#include "hydro/log.h"
#include "hydro/runtime.h"

namespace hydro {

namespace {

std::mutex g_test_calls_mu;
std::function<DeviceCopyCalls()> g_test_calls;

void throw_if_failed(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.message());
}

}  // namespace

DeviceCopyCalls device_calls() {
  std::lock_guard<std::mutex> lock(g_test_calls_mu);
  return g_test_calls ? g_test_calls() : cuda_device_calls();
}

void set_device_calls_for_tests(std::function<DeviceCopyCalls()> make) {
  std::lock_guard<std::mutex> lock(g_test_calls_mu);
  g_test_calls = std::move(make);
}

DeviceCopies::DeviceCopies(DeviceCopyCalls calls)
    : calls_(std::move(calls)),
      staging_(
          StagingCalls{calls_.pin, calls_.unpin, [] { return host_memory_available(); },
                       [this](size_t copy) { return calls_.queue(copy, held_.at(copy).first, held_.at(copy).second); },
                       [this](size_t copy) { return calls_.wait(copy); }},
          [](const std::string& line) { log(line); }) {}

torch::Tensor DeviceCopies::buffer_like(const torch::Tensor& src) {
  const auto options = src.options().device(torch::kCPU).requires_grad(false);
  const uint64_t bytes = static_cast<uint64_t>(src.nbytes());
  std::shared_ptr<char> memory = bytes ? staging_.buffer(bytes) : nullptr;
  if (!memory) return torch::empty(src.sizes(), options);  // torch's own error where none is left
  return torch::from_blob(
      memory.get(), src.sizes(), [memory](void*) {}, options);
}

// The copies wait in held_ by number, as Staging numbers them: a copy that could not be queued
// leaves its number to the next.
Status DeviceCopies::queue(const torch::Tensor& dst, const torch::Tensor& src) {
  std::lock_guard<std::mutex> lock(mu_);
  held_.emplace_back(dst, src.contiguous());
  Status s;
  try {
    s = staging_.queue(static_cast<uint64_t>(src.nbytes()));
  } catch (const std::exception& e) {
    s = Status::io(std::string("queuing a device tensor's copy: ") + e.what());
  }
  if (!s.ok()) held_.pop_back();  // its number is the next copy's
  return s;
}

Status DeviceCopies::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = staging_.finish();
  held_.clear();
  return s;
}

namespace {

// Chunks of this many bytes: the helper and the training thread share a large tensor's copy.
constexpr size_t kCopyChunkBytes = 1 << 20;
// Smaller copies run at once: queuing them costs more than they do.
constexpr size_t kQueueAtLeastBytes = 64 << 10;
// Above this many intra-op threads, torch's own copy_ (split over all of them) beats a memcpy
// shared by two.
constexpr int kShareUpToThreads = 2;

thread_local TensorPool* t_capturing = nullptr;

// Bytes as they are read: strided, not quantized, no lazy conjugate or negation bit.
bool plain_bytes(const torch::Tensor& t) {
  return t.layout() == torch::kStrided && !t.is_quantized() && !t.is_conj() && !t.is_neg();
}

// Host memory a copy of `src`'s bytes can go to as it is: contiguous, with memory of its own, of
// src's dtype and shape.
bool host_slot_for(const torch::Tensor& dst, const torch::Tensor& src) {
  return dst.device().is_cpu() && plain_bytes(dst) && dst.is_contiguous() && dst.has_storage() && plain_bytes(src) &&
         dst.scalar_type() == src.scalar_type() && dst.sizes() == src.sizes();
}

// The copies worth queuing as a memcpy: host to host, both dense with memory of their own (not a
// zero tensor or a storage-less wrapper), large enough, with few intra-op threads.
bool queueable(const torch::Tensor& dst, const torch::Tensor& src) {
  return host_slot_for(dst, src) && src.device().is_cpu() && src.is_contiguous() && src.has_storage() &&
         !src._is_zerotensor() && !dst._is_zerotensor() && static_cast<size_t>(src.nbytes()) >= kQueueAtLeastBytes &&
         at::get_num_threads() <= kShareUpToThreads;
}

void copy_now(const torch::Tensor& dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  dst.copy_(src);
}

}  // namespace

torch::Tensor TensorPool::copy(const std::string& key, const torch::Tensor& t) {
  if (!t.defined()) return t;
  torch::Tensor& slot = slots_[key];
  if (!slot.defined() || slot.sizes() != t.sizes() || slot.scalar_type() != t.scalar_type()) {
    slot = device_.takes(t) ? device_.buffer_like(t)
                            : torch::empty(t.sizes(), t.options().device(torch::kCPU).requires_grad(false));
  }
  copy_into(slot, t);
  return slot;
}

torch::Tensor TensorPool::device_buffer(const torch::Tensor& src) {
  return device_.takes(src) ? device_.buffer_like(src) : torch::Tensor();
}

namespace {
// A resume's pair: dst a contiguous device tensor the pool's calls take, src host memory of its
// shape and dtype, contiguous, plain bytes.
bool restorable(const DeviceCopies& device, const torch::Tensor& dst, const torch::Tensor& src) {
  return dst.defined() && src.defined() && device.takes(dst) && dst.is_contiguous() && host_slot_for(src, dst);
}
}  // namespace

bool TensorPool::restore(const std::string& key, const torch::Tensor& dst, const torch::Tensor& src) {
  if (!restorable(device_, dst, src)) return false;
  torch::Tensor& slot = slots_[key];
  if (!slot.defined() || !host_slot_for(slot, dst)) slot = device_.buffer_like(dst);
  return restore_via(slot, dst, src);
}

bool TensorPool::restore_via(const torch::Tensor& slot, const torch::Tensor& dst, const torch::Tensor& src) {
  if (!restorable(device_, dst, src) || !slot.defined() || !host_slot_for(slot, dst)) return false;
  copy_now(slot, src);
  throw_if_failed(device_.queue(dst, slot));
  return true;
}

torch::Tensor TensorPool::restore_to(const std::string& key, const torch::Tensor& src, torch::Device device) {
  if (!src.defined() || !device_.takes(torch::empty({0}, src.options().device(device)))) return {};
  torch::Tensor dst = torch::empty(src.sizes(), src.options().device(device).requires_grad(false));
  return restore(key, dst, src) ? dst : torch::Tensor();
}

namespace {
thread_local TensorPool* t_restoring = nullptr;
}  // namespace

TensorPool::Restoring::Restoring(TensorPool& pool) : outer_(t_restoring) { t_restoring = &pool; }
TensorPool::Restoring::~Restoring() { t_restoring = outer_; }
TensorPool* TensorPool::restoring() { return t_restoring; }

void TensorPool::finish() {
  try {
    share_.finish();
  } catch (...) {
    (void)device_.finish();  // nothing left writing into the slots
    throw;
  }
  throw_if_failed(device_.finish());
}

void TensorPool::copy_into(const torch::Tensor& dst, const torch::Tensor& src) {
  if (device_.takes(src) && host_slot_for(dst, src)) return throw_if_failed(device_.queue(dst, src));
  if (!queueable(dst, src)) return copy_now(dst, src);
  // The memory, not the tensors: `p.data = ...` may give a tensor other memory before the copy runs.
  auto memory = std::make_shared<std::pair<c10::Storage, c10::Storage>>(dst.storage(), src.storage());
  char* to = static_cast<char*>(dst.data_ptr());
  const char* from = static_cast<const char*>(src.data_ptr());
  const size_t n = src.nbytes();
  for (size_t at = 0; at < n; at += kCopyChunkBytes) {
    const size_t len = std::min(kCopyChunkBytes, n - at);
    share_.add([to = to + at, from = from + at, len, memory] { std::memcpy(to, from, len); });
  }
}

TensorPool::Capturing::Capturing(TensorPool& pool) : pool_(pool), outer_(t_capturing) { t_capturing = &pool; }

TensorPool::Capturing::~Capturing() {
  t_capturing = outer_;
  if (finished_) return;
  try {
    pool_.finish();
  } catch (...) {  // the capture is failing already; its own error is the one reported
  }
}

void TensorPool::Capturing::finish() {
  finished_ = true;
  pool_.finish();
}

TensorPool* TensorPool::capturing() { return t_capturing; }

void copy_for_checkpoint(const torch::Tensor& dst, const torch::Tensor& src) {
  if (TensorPool* pool = TensorPool::capturing()) return pool->copy_into(dst, src);
  copy_now(dst, src);
}

torch::Tensor checkpoint_buffer(const torch::Tensor& src) {
  TensorPool* pool = TensorPool::capturing();
  return pool ? pool->device_buffer(src) : torch::Tensor();
}

torch::Tensor restore_buffer(const torch::Tensor& dst) {
  TensorPool* pool = TensorPool::restoring();
  return pool && dst.defined() && dst.is_contiguous() ? pool->device_buffer(dst) : torch::Tensor();
}

bool restore_through(const torch::Tensor& slot, const torch::Tensor& dst, const torch::Tensor& src) {
  TensorPool* pool = TensorPool::restoring();
  return pool != nullptr && pool->restore_via(slot, dst, src);
}

void wait_restores() {
  if (TensorPool* pool = TensorPool::restoring()) pool->finish();
}

bool restores_through_pool() { return TensorPool::restoring() != nullptr; }

size_t TensorPool::bytes() const {
  size_t n = 0;
  for (const auto& [k, t] : slots_) n += t.numel() * t.element_size();
  return n;
}

namespace {

// A module's tree with its parameters and buffers copied: Module::save()'s layout.
struct ModuleImage {
  std::vector<std::pair<std::string, torch::Tensor>> params, buffers;
  std::vector<std::pair<std::string, std::shared_ptr<ModuleImage>>> children;

  void write(torch::serialize::OutputArchive& a) const {
    for (const auto& [k, t] : params) a.write(k, t);
    for (const auto& [k, t] : buffers) a.write(k, t, /*is_buffer=*/true);
    for (const auto& [k, c] : children) {
      torch::serialize::OutputArchive child(a.compilation_unit());
      c->write(child);
      a.write(k, child);
    }
  }
};

std::shared_ptr<ModuleImage> image_of(const std::string& key, const torch::nn::Module& m, TensorPool& pool) {
  auto img = std::make_shared<ModuleImage>();
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    img->params.emplace_back(p.key(), pool.copy(slot_key(key, p.key()), p.value()));
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    img->buffers.emplace_back(b.key(), pool.copy(slot_key(key, b.key()), b.value()));
  for (const auto& c : m.named_children())
    if (c.value()->is_serializable())
      img->children.emplace_back(c.key(), image_of(slot_key(key, c.key()), *c.value(), pool));
  return img;
}

// An optimizer that only holds param groups and copied states, to be serialized.
class Shadow : public torch::optim::Optimizer {
 public:
  explicit Shadow(const torch::optim::Optimizer& live) : Optimizer(live.param_groups(), live.defaults().clone()) {}
  torch::Tensor step(LossClosure) override { throw std::logic_error("hydro: a snapshot cannot step"); }
  void save(torch::serialize::OutputArchive&) const override {}
  void load(torch::serialize::InputArchive&) override {}
};

template <typename State, typename Options>
Captured capture_typed(const std::string& key, torch::optim::Optimizer& live, TensorPool& pool) {
  auto shadow = std::make_shared<Shadow>(live);
  for (const auto& [k, s] : live.state()) {
    auto c = std::make_unique<State>(static_cast<const State&>(*s));
    const std::string slot = optimizer_state_slot(key, k);
    for_each_state_tensor(
        *c, [&](const std::string& name, const torch::Tensor& t) { return pool.copy(slot_key(slot, name), t); });
    shadow->state()[k] = std::move(c);
  }
  return {[shadow](torch::serialize::OutputArchive& a) { torch::optim::serialize<State, Options>(a, *shadow); },
          nullptr,
          {}};
}

// An optimizer whose state is copied tensor by tensor, by its type.
struct KnownOptimizer {
  bool (*is)(const torch::optim::Optimizer&);
  Captured (*capture)(const std::string& key, torch::optim::Optimizer& live, TensorPool& pool);
};

template <typename Opt, typename State, typename Options>
KnownOptimizer known() {
  return {[](const torch::optim::Optimizer& o) { return dynamic_cast<const Opt*>(&o) != nullptr; },
          capture_typed<State, Options>};
}

// SGD, Adam, AdamW, RMSprop and Adagrad (for_each_state_tensor lists their states' tensors).
const KnownOptimizer* known_optimizer(const torch::optim::Optimizer& o) {
  using namespace torch::optim;
  static const KnownOptimizer all[] = {
      known<SGD, SGDParamState, SGDOptions>(), known<Adam, AdamParamState, AdamOptions>(),
      known<AdamW, AdamWParamState, AdamWOptions>(), known<RMSprop, RMSpropParamState, RMSpropOptions>(),
      known<Adagrad, AdagradParamState, AdagradOptions>()};
  for (const KnownOptimizer& k : all)
    if (k.is(o)) return &k;
  return nullptr;
}

// Adam's and AdamW's states: two types of the same tensors.
template <typename State>
void adam_state_tensors(State& s, const StateTensorFn& f) {
  s.exp_avg(f("exp_avg", s.exp_avg()));
  s.exp_avg_sq(f("exp_avg_sq", s.exp_avg_sq()));
  s.max_exp_avg_sq(f("max_exp_avg_sq", s.max_exp_avg_sq()));
}

}  // namespace

bool for_each_state_tensor(torch::optim::OptimizerParamState& s, const StateTensorFn& f) {
  using namespace torch::optim;
  if (auto* sgd = dynamic_cast<SGDParamState*>(&s)) {
    sgd->momentum_buffer(f("momentum_buffer", sgd->momentum_buffer()));
  } else if (auto* adam = dynamic_cast<AdamParamState*>(&s)) {
    adam_state_tensors(*adam, f);
  } else if (auto* adamw = dynamic_cast<AdamWParamState*>(&s)) {
    adam_state_tensors(*adamw, f);
  } else if (auto* rms = dynamic_cast<RMSpropParamState*>(&s)) {
    rms->square_avg(f("square_avg", rms->square_avg()));
    rms->momentum_buffer(f("momentum_buffer", rms->momentum_buffer()));
    rms->grad_avg(f("grad_avg", rms->grad_avg()));
  } else if (auto* ada = dynamic_cast<AdagradParamState*>(&s)) {
    ada->sum(f("sum", ada->sum()));
  } else {
    return false;
  }
  return true;
}

void for_each_module_slot(const std::string& key, const torch::nn::Module& module,
                          const std::function<void(const std::string& slot, const torch::Tensor&)>& f) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) f(slot_key(key, p.key()), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/false)) f(slot_key(key, b.key()), b.value());
  for (const auto& c : module.named_children())
    if (c.value()->is_serializable()) for_each_module_slot(slot_key(key, c.key()), *c.value(), f);
}

Captured capture_module(const std::string& key, const torch::nn::Module& module, TensorPool& pool) {
  auto img = image_of(key, module, pool);
  return {[img](torch::serialize::OutputArchive& a) { img->write(a); }, nullptr, {}};
}

bool copies_state_by_tensor(const torch::optim::Optimizer& o) { return known_optimizer(o) != nullptr; }

Captured capture_optimizer(const std::string& key, torch::optim::Optimizer& o, TensorPool& pool) {
  if (const KnownOptimizer* k = known_optimizer(o)) return k->capture(key, o, pool);
  return capture_bytes([&o](torch::serialize::OutputArchive& a) { o.save(a); });
}

Captured capture_bytes(const std::function<void(torch::serialize::OutputArchive&)>& save) {
  torch::serialize::OutputArchive archive;
  save(archive);
  auto bytes = std::make_shared<std::string>();
  archive.save_to([&](const void* d, size_t n) {
    bytes->append(static_cast<const char*>(d), n);
    return n;
  });
  return {nullptr, bytes, {}};
}

}  // namespace hydro
