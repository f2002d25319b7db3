// hydro::store_collectives (hydro/distributed.h): broadcast, allreduce and allgather over a c10d
// Store alone. Collective number K of every rank publishes rank R's tensors under "hydro/K/R" and
// reads every other rank's key of K; then it deletes its own key of K-1, which every rank has read by
// now (each published K only after reading all of K-1): the store holds two collectives at most.
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <cstring>
#include <stdexcept>

#include "hydro/distributed.h"

namespace hydro {
namespace {

// A collective that finished inside the call that made it (or threw there).
class Done : public c10d::Work {
 public:
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
};

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  at::Tensor c = t.contiguous().cpu();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// `into`'s elements from `bytes`, which must be as many as it holds.
void fill(at::Tensor& into, const std::vector<uint8_t>& bytes, const char* what) {
  if (bytes.size() != into.nbytes())
    throw std::runtime_error(std::string("hydro: store_collectives: ") + what + ": a rank gave " +
                             std::to_string(bytes.size()) + " bytes where this one holds " +
                             std::to_string(into.nbytes()) + ": every rank must pass tensors of the same shape");
  at::Tensor c = at::empty(into.sizes(), into.options().device(at::kCPU));
  std::memcpy(c.data_ptr(), bytes.data(), bytes.size());
  into.copy_(c);
}

class StoreCollectives : public Collectives {
 public:
  StoreCollectives(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
      : Collectives(rank, size), store_(std::move(store)) {}

  const std::string getBackendName() const override { return "hydro-store"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    auto all = exchange(tensors, [&](int r) { return r == static_cast<int>(opts.rootRank); });
    if (getRank() != opts.rootRank) unpack(all[opts.rootRank], tensors, "broadcast");
    return c10::make_intrusive<Done>();
  }

  // SUM only: the ranks' tensors added in rank order, so every rank holds the same bits.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (opts.reduceOp != c10d::ReduceOp::SUM)
      throw std::runtime_error("hydro: store_collectives: allreduce adds (ReduceOp::SUM) and nothing else");
    auto all = exchange(tensors, [](int) { return true; });
    for (size_t i = 0; i < tensors.size(); ++i) {
      at::Tensor sum = at::empty(tensors[i].sizes(), tensors[i].options().device(at::kCPU));
      for (int r = 0; r < getSize(); ++r) {
        at::Tensor part = at::empty_like(sum);
        fill(part, all[r][i], "allreduce");
        if (r == 0)
          sum.copy_(part);
        else
          sum.add_(part);
      }
      tensors[i].copy_(sum);
    }
    return c10::make_intrusive<Done>();
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions&) override {
    auto all = exchange(in, [](int) { return true; });
    for (size_t i = 0; i < in.size(); ++i)
      for (int r = 0; r < getSize(); ++r) fill(out.at(i).at(r), all[r][i], "allgather");
    return c10::make_intrusive<Done>();
  }

 private:
  using Parts = std::vector<std::vector<uint8_t>>;  // one rank's tensors, as bytes

  std::string key(int64_t k, int r) const { return "hydro/" + std::to_string(k) + "/" + std::to_string(r); }

  // Each rank's tensors of this collective (those for which `gives` holds; the others' are empty).
  // Round trips to the store: set, the others' keys (each a wait and a get; one of each where the
  // store has multiGet), and the delete of this rank's key of the collective before.
  template <typename Gives>
  std::vector<Parts> exchange(const std::vector<at::Tensor>& mine, Gives gives) {
    const int64_t k = next_++;
    std::vector<uint8_t> packed;
    if (gives(getRank())) pack(mine, &packed);
    store_->set(key(k, getRank()), packed);
    std::vector<std::string> keys;
    for (int r = 0; r < getSize(); ++r)
      if (r != getRank()) keys.push_back(key(k, r));
    std::vector<std::vector<uint8_t>> values = read(keys);  // even empty: rank r has read all of k - 1
    std::vector<Parts> all(getSize());
    for (int r = 0, i = 0; r < getSize(); ++r) {
      const std::vector<uint8_t>& value = r == getRank() ? packed : values[i++];
      if (gives(r)) all[r] = split(value);
    }
    if (k > 0) store_->deleteKey(key(k - 1, getRank()));
    return all;
  }

  std::vector<std::vector<uint8_t>> read(const std::vector<std::string>& keys) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)  // Store::multiGet
    return store_->multiGet(keys);
#else
    std::vector<std::vector<uint8_t>> values;
    for (const auto& k : keys) values.push_back(store_->get(k));
    return values;
#endif
  }

  static void pack(const std::vector<at::Tensor>& tensors, std::vector<uint8_t>* out) {
    for (const auto& t : tensors) {
      std::vector<uint8_t> b = bytes_of(t);
      const uint64_t n = b.size();
      out->insert(out->end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + sizeof n);
      out->insert(out->end(), b.begin(), b.end());
    }
  }

  static Parts split(const std::vector<uint8_t>& packed) {
    Parts parts;
    for (size_t at = 0; at + sizeof(uint64_t) <= packed.size();) {
      uint64_t n = 0;
      std::memcpy(&n, packed.data() + at, sizeof n);
      at += sizeof n;
      if (n > packed.size() - at) throw std::runtime_error("hydro: store_collectives: a rank's value is cut short");
      parts.emplace_back(packed.begin() + static_cast<std::ptrdiff_t>(at),
                         packed.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
    return parts;
  }

  static void unpack(const Parts& parts, std::vector<at::Tensor>& tensors, const char* what) {
    if (parts.size() != tensors.size())
      throw std::runtime_error(std::string("hydro: store_collectives: ") + what + ": the root gave " +
                               std::to_string(parts.size()) + " tensors where this rank passed " +
                               std::to_string(tensors.size()));
    for (size_t i = 0; i < tensors.size(); ++i) fill(tensors[i], parts[i], what);
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int64_t next_ = 0;
};

}  // namespace

c10::intrusive_ptr<Collectives> store_collectives(c10::intrusive_ptr<c10d::Store> store, int rank, int size) {
  if (!store) throw std::invalid_argument("hydro: store_collectives: no store");
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("hydro: store_collectives: rank " + std::to_string(rank) + " of " +
                                std::to_string(size));
  return c10::make_intrusive<StoreCollectives>(std::move(store), rank, size);
}

}  // namespace hydro
