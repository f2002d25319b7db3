#include "tracked.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "hydro/log.h"

namespace hydro {
namespace {

// In the model's own order (parameters, then buffers).
std::vector<std::pair<std::string, std::vector<int64_t>>> tensor_shapes(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> v;
  for (const auto& p : module.named_parameters()) v.emplace_back(p.key(), p.value().sizes().vec());
  for (const auto& b : module.named_buffers()) v.emplace_back(b.key(), b.value().sizes().vec());
  return v;
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// A tensor as it was before a load: the tensor, an alias of its memory then (kept, so that the
// load does not free it), and its slot in the pool.
struct Before {
  torch::Tensor t, memory;
  std::string slot;
};

std::vector<Before> before_load(const std::string& key, const torch::nn::Module& module) {
  std::vector<Before> v;
  for_each_module_slot(key, module, [&v](const std::string& slot, const torch::Tensor& t) {
    v.push_back({t, t.defined() ? t.detach() : t, slot});
  });
  return v;
}

// Runs `queue`, whose restores go through `pool` where the resume restores through one, then waits
// for them. Where `queue` fails, what it queued is waited for first (no copy is left writing into
// memory), and its failure is the error thrown.
void restoring_through(TensorPool* pool, const std::function<void()>& queue) {
  if (!pool) return queue();
  try {
    queue();
  } catch (...) {
    try {
      pool->finish();
    } catch (...) {
    }
    throw;
  }
  pool->finish();
}

// libtorch's read puts a tensor it loads where the checkpoint's was (set_data): a checkpoint's
// copies of device tensors are host tensors (a staged save's, an async one's). Each goes back into
// the memory it had on its device: through its pinned slot on hydro's stream where the resume
// restores through a pool (TensorPool::restoring(), issue 58), all queued, then waited for; by
// torch's copy for any other.
void back_to(const std::vector<Before>& tensors) {
  torch::NoGradGuard no_grad;
  TensorPool* pool = TensorPool::restoring();
  restoring_through(pool, [&] {
    for (const auto& b : tensors) {
      if (!b.t.defined() || !b.memory.defined()) continue;
      if (pool && pool->restore(b.slot, b.memory, b.t)) {
        b.t.set_data(b.memory);
      } else if (b.t.device() != b.memory.device()) {
        b.t.set_data(b.t.to(b.memory.device()));
      }
    }
  });
}

// libtorch's key for a parameter's optimizer state: its TensorImpl's address (2.x), or that
// address as text (1.x).
template <typename Key>
Key state_key_of(const torch::Tensor& p) {
  if constexpr (std::is_pointer_v<Key>) {
    return p.unsafeGetTensorImpl();
  } else {
    std::ostringstream text;  // as 1.x's c10::guts::to_string writes it
    text << p.unsafeGetTensorImpl();
    return text.str();
  }
}

// Optimizer::load keeps each state tensor where the checkpoint's was: each goes to its parameter's
// device, as Python's load_state_dict does, through its pinned slot where the resume restores
// through a pool (as back_to).
void load_optimizer_by_params(const std::string& name, torch::optim::Optimizer& optimizer,
                              torch::serialize::InputArchive& a) {
  optimizer.load(a);
  TensorPool* pool = TensorPool::restoring();
  using Key = std::decay_t<decltype(optimizer.state().begin()->first)>;
  std::map<Key, torch::Device> device_of;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) device_of.emplace(state_key_of<Key>(p), p.device());
  torch::NoGradGuard no_grad;
  restoring_through(pool, [&] {
    for (auto& [key, state] : optimizer.state()) {
      auto it = device_of.find(key);
      if (it == device_of.end()) continue;
      const std::string slot = optimizer_state_slot(name, key);
      for_each_state_tensor(*state, [&](const std::string& tensor, const torch::Tensor& t) {
        torch::Tensor staged = pool ? pool->restore_to(slot_key(slot, tensor), t, it->second) : torch::Tensor();
        if (staged.defined()) return staged;
        return t.defined() && t.device() != it->second ? t.to(it->second) : t;
      });
    }
  });
}

// Module::load replaces each tensor with the saved one, whatever its shape: a checkpoint of
// another model must be an error that names the tensor, not a model that silently changed.
void load_module_checked(const std::string& key, torch::nn::Module& module, torch::serialize::InputArchive& a) {
  auto before = tensor_shapes(module);
  const auto tensors = before_load(key, module);
  module.load(a);
  back_to(tensors);
  std::map<std::string, std::vector<int64_t>> after;
  for (auto& [key, shape] : tensor_shapes(module)) after[key] = std::move(shape);
  for (const auto& [key, shape] : before) {
    auto it = after.find(key);
    if (it != after.end() && it->second != shape)
      throw std::runtime_error("tensor '" + key + "' has shape " + shape_text(it->second) + ", the model's is " +
                               shape_text(shape) + " (a checkpoint of a different model?)");
  }
}

// Streams one file of a checkpoint through `write`.
Status write_streamed(CheckpointWriter& writer, const std::string& file, const StreamWriter& write) {
  std::unique_ptr<FileSink> sink;
  HYDRO_RETURN_IF_ERROR(writer.open_file(file, &sink));
  HYDRO_RETURN_IF_ERROR(write([&](const void* d, size_t n) { return sink->append(d, n); }));
  return sink->finish();
}

}  // namespace

bool valid_tracked_name(const std::string& name) {
  if (name.empty() || name == "rng") return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

Status stream_archive(torch::serialize::OutputArchive& archive, const std::string& name, const ByteSink& append) {
  Status err;
  try {
    // Always "written": a short count makes libtorch's zip writer throw, and its destructor may
    // throw again while unwinding. The first failure is kept and later bytes are dropped.
    archive.save_to([&](const void* data, size_t n) -> size_t {
      if (err.ok()) err = append(data, n);
      return n;
    });
  } catch (const c10::Error& e) {
    if (!err.ok()) return err;  // our write failed first: report that, it names the file
    return Status::io("serializing " + name + ": " + e.what_without_backtrace());
  }
  return err;
}

TrackedItem archive_item(const std::string& name, std::function<void(torch::serialize::OutputArchive&)> save,
                         std::function<void(torch::serialize::InputArchive&)> load,
                         std::function<Captured(TensorPool&)> capture) {
  TrackedItem t;
  t.name = name;
  t.write = [save, file = name + ".pt"](const ByteSink& append) {
    torch::serialize::OutputArchive archive;
    save(archive);
    return stream_archive(archive, file, append);
  };
  t.read = [load](const std::string& path) {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    load(archive);
  };
  t.capture = capture ? std::move(capture) : [save](TensorPool&) { return capture_bytes(save); };
  return t;
}

TrackedItem module_item(const std::string& name, torch::nn::Module& module) {
  TrackedItem t = archive_item(
      name, [&module](auto& a) { module.save(a); }, [&module, name](auto& a) { load_module_checked(name, module, a); },
      [&module, name](TensorPool& pool) { return capture_module(name, module, pool); });
  t.stages = true;
  return t;
}

TrackedItem optimizer_item(const std::string& name, torch::optim::Optimizer& optimizer) {
  TrackedItem t = archive_item(
      name, [&optimizer](auto& a) { optimizer.save(a); },
      [&optimizer, name](auto& a) { load_optimizer_by_params(name, optimizer, a); },
      [&optimizer, name](TensorPool& pool) { return capture_optimizer(name, optimizer, pool); });
  t.stages = copies_state_by_tensor(optimizer);
  return t;
}

TrackedItem sampler_item(const std::string& name, torch::data::samplers::Sampler<>& sampler) {
  return archive_item(
      name, [&sampler](auto& a) { sampler.save(a); }, [&sampler](auto& a) { sampler.load(a); });
}

TrackedItem tensor_item(const std::string& name, torch::Tensor& tensor) {
  TrackedItem t = archive_item(
      name, [&tensor](auto& a) { a.write("tensor", tensor); },
      [&tensor, name](auto& a) {
        std::vector<Before> before;
        if (tensor.defined()) before.push_back({tensor, tensor.detach(), name});  // none yet: read assigns
        a.read("tensor", tensor);
        back_to(before);
      },
      [&tensor, name](TensorPool& pool) {
        torch::Tensor copy = pool.copy(name, tensor);
        return Captured{[copy](torch::serialize::OutputArchive& a) { a.write("tensor", copy); }, nullptr, {}};
      });
  t.stages = true;
  return t;
}

TrackedItem string_item(const std::string& name, std::string& value) {
  return archive_item(
      name, [&value](auto& a) { a.write("string", c10::IValue(value)); },
      [&value, name](auto& a) {
        c10::IValue v;
        a.read("string", v);
        if (!v.isString()) throw std::runtime_error("checkpoint file " + name + ".pt holds no string");
        value = v.toStringRef();
      },
      [&value](TensorPool&) {
        return Captured{
            [copy = value](torch::serialize::OutputArchive& a) { a.write("string", c10::IValue(copy)); }, nullptr, {}};
      });
}

TrackedItem stream_item(const std::string& name, StreamWriter write, std::function<void(const std::string&)> read,
                        std::function<StreamWriter()> capture) {
  TrackedItem t;
  t.name = name;
  t.write = write;
  t.read = std::move(read);
  t.stages = capture != nullptr;
  t.capture = [write, capture](TensorPool&) {
    if (capture) return Captured{nullptr, nullptr, capture()};
    auto bytes = std::make_shared<std::string>();
    Status st = write([&](const void* d, size_t n) {
      bytes->append(static_cast<const char*>(d), n);
      return Status::OK();
    });
    if (!st.ok()) throw std::runtime_error(st.message());
    return Captured{nullptr, bytes, {}};
  };
  return t;
}

namespace {

// The random generators' states: the CPU's, and each CUDA device's when libtorch has CUDA (through
// ATen's CUDA hooks, so no CUDA headers are needed here).
int cuda_devices() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

at::Generator cuda_generator(int i) {
  return at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(i)));
}

torch::Tensor state_of(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void restore(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The generators' states, in the order rng.pt holds them. get_state() returns copies: an async
// checkpoint takes them on the training thread and archives them on its background thread.
std::vector<std::pair<std::string, torch::Tensor>> rng_states() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.emplace_back("cpu", state_of(at::detail::getDefaultCPUGenerator()));
  const int n = cuda_devices();
  out.emplace_back("cuda_devices", torch::tensor(static_cast<int64_t>(n)));
  for (int i = 0; i < n; ++i) out.emplace_back("cuda" + std::to_string(i), state_of(cuda_generator(i)));
  return out;
}

void write_rng(torch::serialize::OutputArchive& a, const std::vector<std::pair<std::string, torch::Tensor>>& states) {
  for (const auto& [key, state] : states) a.write(key, state);
}

void save_rng(torch::serialize::OutputArchive& a) { write_rng(a, rng_states()); }

Captured capture_rng(TensorPool&) {
  return Captured{[states = rng_states()](torch::serialize::OutputArchive& a) { write_rng(a, states); }, nullptr, {}};
}

void load_rng(torch::serialize::InputArchive& a) {
  torch::Tensor state;
  a.read("cpu", state);
  restore(at::detail::getDefaultCPUGenerator(), state);
  torch::Tensor count;
  if (!a.try_read("cuda_devices", count)) return;  // written before hydro saved CUDA state
  const int saved = static_cast<int>(count.item<int64_t>()), here = cuda_devices();
  if (saved > here)
    log("warning: the checkpoint has the RNG state of " + std::to_string(saved) + " CUDA devices, this process sees " +
        std::to_string(here) + ": only the first " + std::to_string(here) + " are restored");
  for (int i = 0; i < std::min(saved, here); ++i) {
    a.read("cuda" + std::to_string(i), state);
    restore(cuda_generator(i), state);
  }
}

}  // namespace

const TrackedItem& rng_item() {
  static const TrackedItem item = archive_item("rng", save_rng, load_rng, capture_rng);
  return item;
}

Status write_item(CheckpointWriter& writer, const TrackedItem& item, TensorPool* pool) {
  const std::string file = item.name + ".pt";
  if (!pool || !item.stages || !pool->stages_device_tensors()) return write_streamed(writer, file, item.write);
  Captured copy;
  try {
    TensorPool::Capturing capturing(*pool);
    copy = item.capture(*pool);
    capturing.finish();
  } catch (const std::exception& e) {
    return Status::io("copying the state of " + file + " to host memory: " + e.what());
  }
  return write_captured(writer, file, copy);
}

Status write_captured(CheckpointWriter& writer, const std::string& file, const Captured& c) {
  if (c.bytes) return writer.write_file(file, *c.bytes);
  if (c.stream) return write_streamed(writer, file, c.stream);
  return write_streamed(writer, file, [&](const ByteSink& append) {
    torch::serialize::OutputArchive archive;
    c.write(archive);
    return stream_archive(archive, file, append);
  });
}

}  // namespace hydro
