#include "c10d_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

namespace hydro {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

class C10dStore : public RankStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  Status set(const std::string& key, const std::string& value) override {
    return guard("set " + key, [&] { store_->set(key, bytes(value)); });
  }
  Status get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override {
    bool present = false;
    Status s = guard("wait " + key, [&] {
      try {
        store_->wait({key}, timeout);
        present = true;
      } catch (const std::exception& e) {
        // An expired wait: "Socket Timeout" / "Wait timeout" (the type differs between versions).
        if (std::string(e.what()).find("imeout") == std::string::npos) throw;
      }
      if (present) {
        auto v = store_->get(key);
        value->assign(v.begin(), v.end());
      }
    });
    if (s.ok() && !present) return Status::not_found("timeout waiting for " + key);
    return s;
  }
  Status add(const std::string& key, int64_t delta, int64_t* value) override {
    return guard("add " + key, [&] { *value = store_->add(key, delta); });
  }
  Status remove(const std::string& key) override {
    return guard("delete " + key, [&] { store_->deleteKey(key); });
  }

 private:
  template <typename Fn>
  Status guard(const std::string& what, Fn fn) {
    try {
      fn();
      return Status::OK();
    } catch (const std::exception& e) {
      return Status::io("rank store: " + what + ": " + e.what());
    }
  }
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::unique_ptr<RankStore> connect_tcp_store(const Settings& s) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(s.dist.master_port + 1);
  opts.isServer = s.rank == 0;
  opts.numWorkers = static_cast<size_t>(s.world_size);
  opts.waitWorkers = false;
  opts.timeout = std::chrono::seconds(s.store_timeout_s);
  try {
    return std::make_unique<C10dStore>(c10::make_intrusive<c10d::TCPStore>(s.dist.master_addr, opts));
  } catch (const std::exception& e) {
    throw std::runtime_error("hydro: cannot reach the ranks' store at " + s.dist.master_addr + ":" +
                             std::to_string(opts.port) + " (MASTER_ADDR, MASTER_PORT + 1) within HYDRO_STORE_TIMEOUT=" +
                             std::to_string(s.store_timeout_s) + " s: " + e.what());
  }
}

}  // namespace hydro
