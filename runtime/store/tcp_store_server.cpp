// The store's server: an accepting thread, and one thread per connection that first runs the
// handshake, then answers requests in order. A get waits on the shared map for its key, woken only
// when that key is set: a commit of N ranks parks about N gets at once, and waking every one of
// them on each of the N sets would cost N² wakeups.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "hydro/log.h"
#include "hydro/tcp_store.h"
#include "store_handshake.h"
#include "store_wire.h"

namespace hydro {

struct TcpStoreServer::State {
  int listen_fd = -1;
  int port = 0;
  std::string scope;
  struct Waiters {
    std::condition_variable set;  // the key was set, or stopping
    int count = 0;
  };
  std::mutex mu;
  std::condition_variable changed;  // a connection thread ended
  std::map<std::string, std::string> data;
  std::map<std::string, Waiters> waiting;  // the keys gets wait for
  std::set<int> fds;                       // open connections
  int threads = 0;                         // connection threads still running
  bool stopping = false;
  std::thread acceptor;
};

namespace {

constexpr auto kHandshakeTime = std::chrono::seconds(10);
constexpr auto kIdleLook = std::chrono::milliseconds(60000);
constexpr int kMaxConnections = 4096;
constexpr int64_t kMaxWaitMs = int64_t{7} * 24 * 3600 * 1000;

using State = TcpStoreServer::State;

// Under st.mu: `key` now has a value; the gets waiting for it go on.
void wake(State& st, const std::string& key) {
  auto it = st.waiting.find(key);
  if (it != st.waiting.end()) it->second.set.notify_all();
}

// A request's wait: its timeout argument, in running time from now, within kMaxWaitMs.
std::optional<store::Deadline> deadline_of(const std::string& arg) {
  int64_t ms = 0;
  if (!store::decode_i64(arg, &ms) || ms < 0) return std::nullopt;
  return store::Deadline(std::chrono::milliseconds(std::min(ms, kMaxWaitMs)));
}

// Under `lock` on st.mu: until `key` is set, the deadline passes or the server stops.
void wait_for_key(State& st, std::unique_lock<std::mutex>& lock, const std::string& key, store::Deadline& deadline) {
  auto ready = [&] { return st.stopping || st.data.count(key) > 0; };
  if (ready()) return;
  State::Waiters& w = st.waiting[key];  // a map's nodes stay put while others come and go
  ++w.count;
  while (!w.set.wait_for(lock, deadline.next_wait(), ready) && !deadline.passed()) {
  }
  if (--w.count == 0) st.waiting.erase(key);
}

std::string get(State& st, const std::string& key, const std::string& arg) {
  std::optional<store::Deadline> deadline = deadline_of(arg);
  if (!deadline) return std::string(1, store::kError) + "bad timeout";
  std::unique_lock<std::mutex> lock(st.mu);
  wait_for_key(st, lock, key, *deadline);
  auto it = st.data.find(key);
  if (it == st.data.end()) return std::string(1, store::kTimeout);
  return std::string(1, store::kOk) + it->second;
}

// Every key of the list once all are set, or what is set at the deadline: '+value' or '-' each.
std::string get_all(State& st, const std::string& list, const std::string& arg) {
  std::optional<store::Deadline> deadline = deadline_of(arg);
  std::vector<std::string> keys;
  if (!deadline) return std::string(1, store::kError) + "bad timeout";
  if (!store::decode_list(list, &keys)) return std::string(1, store::kError) + "bad key list";
  std::unique_lock<std::mutex> lock(st.mu);
  for (const auto& key : keys) wait_for_key(st, lock, key, *deadline);
  std::vector<std::string> found;
  size_t bytes = 0;
  for (const auto& key : keys) {
    auto it = st.data.find(key);
    found.push_back(it == st.data.end() ? "-" : "+" + it->second);
    bytes += found.back().size() + 4;
  }
  if (bytes + 5 > store::kMaxFrame)  // the client could not read the reply: say so in a small one
    return std::string(1, store::kError) + "the values of " + std::to_string(keys.size()) + " keys exceed " +
           std::to_string(store::kMaxFrame >> 20) + " MiB";
  return std::string(1, store::kOk) + store::encode_list(found);
}

std::string add(State& st, const std::string& key, const std::string& arg) {
  int64_t delta = 0;
  if (!store::decode_i64(arg, &delta)) return std::string(1, store::kError) + "bad delta";
  std::lock_guard<std::mutex> lock(st.mu);
  int64_t v = 0;
  auto it = st.data.find(key);
  if (it != st.data.end()) {
    try {
      v = std::stoll(it->second);
    } catch (const std::exception&) {
      return std::string(1, store::kError) + "key " + key + " holds no number";
    }
  }
  v += delta;
  st.data[key] = std::to_string(v);
  wake(st, key);
  return std::string(1, store::kOk) + store::encode_i64(v);
}

std::string answer(State& st, store::Op op, const std::string& key, const std::string& arg) {
  switch (op) {
    case store::kGet: return get(st, key, arg);
    case store::kGetAll: return get_all(st, key, arg);
    case store::kAdd: return add(st, key, arg);
    case store::kSet: {
      std::lock_guard<std::mutex> lock(st.mu);
      st.data[key] = arg;
      wake(st, key);
      return std::string(1, store::kOk);
    }
    case store::kDelete: {
      std::lock_guard<std::mutex> lock(st.mu);
      st.data.erase(key);
      return std::string(1, store::kOk);
    }
  }
  return std::string(1, store::kError) + "unknown request";
}

void serve(std::shared_ptr<State> st, int fd) {
  store::Deadline handshake(kHandshakeTime);
  Status s = store::handshake_server(fd, st->scope, handshake);
  if (!s.ok() && s.code() != Code::not_found) log("warning: " + s.message());  // not: a port probe
  while (s.ok()) {
    std::string frame, key, arg;
    store::Op op;
    // Between requests a connection may idle for the whole job: a look a minute, not two a second.
    store::Deadline request(kHoldProof, kIdleLook);
    if (!store::recv_frame(fd, store::kMaxFrame, request, &frame).ok()) break;
    if (!store::parse_request(frame, &op, &key, &arg)) break;
    const std::string reply = answer(*st, op, key, arg);  // a get may wait its whole timeout here
    store::Deadline sending(std::chrono::minutes(5));
    if (!store::send_frame(fd, reply, sending).ok()) break;
  }
  std::lock_guard<std::mutex> lock(st->mu);
  st->fds.erase(fd);
  ::close(fd);
  --st->threads;
  st->changed.notify_all();
}

void accept_loop(std::shared_ptr<State> st) {
  for (;;) {
    int fd = ::accept4(st->listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)) {
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(st->mu);
      if (st->stopping) return;
      continue;
    }
    std::lock_guard<std::mutex> lock(st->mu);
    if (fd < 0 || st->stopping) {
      if (fd >= 0) ::close(fd);
      return;
    }
    if (st->threads >= kMaxConnections) {
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    st->fds.insert(fd);
    ++st->threads;
    std::thread(serve, st, fd).detach();
  }
}

Status listen_on(int port, int* fd_out, int* bound) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::from_errno(errno, "the ranks' store: socket");
  int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // past TIME_WAIT; never SO_REUSEPORT
  sockaddr_storage addr{};
  socklen_t len;
  if (v6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 512) != 0) {
    Status s = Status::from_errno(errno, "the ranks' store: cannot listen on port " + std::to_string(port));
    ::close(fd);
    return s;
  }
  len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound =
      ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  *fd_out = fd;
  return Status::OK();
}

}  // namespace

Status TcpStoreServer::start(int port, std::string scope, std::unique_ptr<TcpStoreServer>* out) {
  auto st = std::make_shared<State>();
  st->scope = std::move(scope);
  HYDRO_RETURN_IF_ERROR(listen_on(port, &st->listen_fd, &st->port));
  st->acceptor = std::thread(accept_loop, st);
  out->reset(new TcpStoreServer(st));
  return Status::OK();
}

TcpStoreServer::TcpStoreServer(std::shared_ptr<State> state) : state_(std::move(state)) {}

int TcpStoreServer::port() const { return state_->port; }

TcpStoreServer::~TcpStoreServer() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
    for (int fd : state_->fds) ::shutdown(fd, SHUT_RDWR);
    for (auto& [key, w] : state_->waiting) w.set.notify_all();
  }
  ::shutdown(state_->listen_fd, SHUT_RDWR);
  state_->acceptor.join();
  ::close(state_->listen_fd);
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->changed.wait(lock, [&] { return state_->threads == 0; });
}

}  // namespace hydro
