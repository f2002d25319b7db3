// The store's server: an accepting thread, and one thread per connection that first runs the
// handshake, then answers requests in order. A get waits on the shared map for its key.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "hydro/log.h"
#include "hydro/tcp_store.h"
#include "store_handshake.h"
#include "store_wire.h"

namespace hydro {

using store::Clock;

struct TcpStoreServer::State {
  int listen_fd = -1;
  int port = 0;
  std::string scope;
  std::mutex mu;
  std::condition_variable changed;  // a key was set, or stopping
  std::map<std::string, std::string> data;
  std::set<int> fds;  // open connections
  int threads = 0;    // connection threads still running
  bool stopping = false;
  std::thread acceptor;
};

namespace {

constexpr auto kHandshakeTime = std::chrono::seconds(10);
constexpr int kMaxConnections = 4096;
constexpr int64_t kMaxWaitMs = int64_t{7} * 24 * 3600 * 1000;

using State = TcpStoreServer::State;

std::string get(State& st, const std::string& key, const std::string& arg) {
  int64_t ms = 0;
  if (!store::decode_i64(arg, &ms) || ms < 0) return std::string(1, store::kError) + "bad timeout";
  auto deadline = Clock::now() + std::chrono::milliseconds(std::min(ms, kMaxWaitMs));
  std::unique_lock<std::mutex> lock(st.mu);
  st.changed.wait_until(lock, deadline, [&] { return st.stopping || st.data.count(key) > 0; });
  auto it = st.data.find(key);
  if (it == st.data.end()) return std::string(1, store::kTimeout);
  return std::string(1, store::kOk) + it->second;
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
  st.changed.notify_all();
  return std::string(1, store::kOk) + store::encode_i64(v);
}

std::string answer(State& st, store::Op op, const std::string& key, const std::string& arg) {
  switch (op) {
    case store::kGet: return get(st, key, arg);
    case store::kAdd: return add(st, key, arg);
    case store::kSet: {
      std::lock_guard<std::mutex> lock(st.mu);
      st.data[key] = arg;
      st.changed.notify_all();
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
  Status s = store::handshake_server(fd, st->scope, Clock::now() + kHandshakeTime);
  if (!s.ok() && s.code() != Code::not_found) log("warning: " + s.message());  // not: a port probe
  while (s.ok()) {
    std::string frame, key, arg;
    store::Op op;
    if (!store::recv_frame(fd, store::kMaxFrame, Clock::now() + std::chrono::hours(24 * 365), &frame).ok()) break;
    if (!store::parse_request(frame, &op, &key, &arg)) break;
    if (!store::send_frame(fd, answer(*st, op, key, arg), Clock::now() + std::chrono::minutes(5)).ok()) break;
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
    state_->changed.notify_all();
  }
  ::shutdown(state_->listen_fd, SHUT_RDWR);
  state_->acceptor.join();
  ::close(state_->listen_fd);
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->changed.wait(lock, [&] { return state_->threads == 0; });
}

}  // namespace hydro
