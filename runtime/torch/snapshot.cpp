#include "snapshot.h"

namespace hydro {

torch::Tensor TensorPool::copy(const std::string& key, const torch::Tensor& t) {
  if (!t.defined()) return t;
  torch::NoGradGuard no_grad;
  torch::Tensor& slot = slots_[key];
  if (!slot.defined() || slot.sizes() != t.sizes() || slot.scalar_type() != t.scalar_type())
    slot = torch::empty(t.sizes(), t.options().device(torch::kCPU).requires_grad(false));
  slot.copy_(t);
  return slot;
}

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
    img->params.emplace_back(p.key(), pool.copy(key + "/" + p.key(), p.value()));
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    img->buffers.emplace_back(b.key(), pool.copy(key + "/" + b.key(), b.value()));
  for (const auto& c : m.named_children())
    if (c.value()->is_serializable())
      img->children.emplace_back(c.key(), image_of(key + "/" + c.key(), *c.value(), pool));
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

torch::Tensor copy_if(TensorPool& pool, const std::string& key, const torch::Tensor& t) { return pool.copy(key, t); }

template <typename State, typename Options>
Captured capture_typed(const std::string& key, torch::optim::Optimizer& live,
                       const std::function<void(State&, const std::string&)>& deep) {
  auto shadow = std::make_shared<Shadow>(live);
  for (const auto& [k, s] : live.state()) {
    auto c = std::make_unique<State>(static_cast<const State&>(*s));
    deep(*c, key + "/" + k);
    shadow->state()[k] = std::move(c);
  }
  return {[shadow](torch::serialize::OutputArchive& a) { torch::optim::serialize<State, Options>(a, *shadow); },
          nullptr,
          {}};
}

}  // namespace

Captured capture_module(const std::string& key, const torch::nn::Module& module, TensorPool& pool) {
  auto img = image_of(key, module, pool);
  return {[img](torch::serialize::OutputArchive& a) { img->write(a); }, nullptr, {}};
}

Captured capture_optimizer(const std::string& key, torch::optim::Optimizer& o, TensorPool& pool) {
  using namespace torch::optim;
  if (dynamic_cast<SGD*>(&o))
    return capture_typed<SGDParamState, SGDOptions>(key, o, [&](SGDParamState& s, const std::string& k) {
      s.momentum_buffer(copy_if(pool, k + "/momentum_buffer", s.momentum_buffer()));
    });
  if (dynamic_cast<Adam*>(&o))
    return capture_typed<AdamParamState, AdamOptions>(key, o, [&](AdamParamState& s, const std::string& k) {
      s.exp_avg(copy_if(pool, k + "/exp_avg", s.exp_avg()));
      s.exp_avg_sq(copy_if(pool, k + "/exp_avg_sq", s.exp_avg_sq()));
      s.max_exp_avg_sq(copy_if(pool, k + "/max_exp_avg_sq", s.max_exp_avg_sq()));
    });
  if (dynamic_cast<AdamW*>(&o))
    return capture_typed<AdamWParamState, AdamWOptions>(key, o, [&](AdamWParamState& s, const std::string& k) {
      s.exp_avg(copy_if(pool, k + "/exp_avg", s.exp_avg()));
      s.exp_avg_sq(copy_if(pool, k + "/exp_avg_sq", s.exp_avg_sq()));
      s.max_exp_avg_sq(copy_if(pool, k + "/max_exp_avg_sq", s.max_exp_avg_sq()));
    });
  if (dynamic_cast<RMSprop*>(&o))
    return capture_typed<RMSpropParamState, RMSpropOptions>(key, o, [&](RMSpropParamState& s, const std::string& k) {
      s.square_avg(copy_if(pool, k + "/square_avg", s.square_avg()));
      s.momentum_buffer(copy_if(pool, k + "/momentum_buffer", s.momentum_buffer()));
      s.grad_avg(copy_if(pool, k + "/grad_avg", s.grad_avg()));
    });
  if (dynamic_cast<Adagrad*>(&o))
    return capture_typed<AdagradParamState, AdagradOptions>(
        key, o, [&](AdagradParamState& s, const std::string& k) { s.sum(copy_if(pool, k + "/sum", s.sum())); });
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
