// The store's client: one connection, one request at a time.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "hydro/tcp_store.h"
#include "store_handshake.h"
#include "store_wire.h"

namespace hydro {
namespace {

using store::Clock;

// How long a request may take beyond its own wait before the server counts as gone.
constexpr auto kReplyMargin = std::chrono::minutes(2);

class TcpStoreClient : public RankStore {
 public:
  TcpStoreClient(int fd, std::string where) : fd_(fd), where_(std::move(where)) {}
  ~TcpStoreClient() override { ::close(fd_); }

  Status set(const std::string& key, const std::string& value) override {
    std::string body;
    return call(store::request(store::kSet, key, value), kReplyMargin, &body, nullptr);
  }
  Status get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) override {
    bool timed_out = false;
    HYDRO_RETURN_IF_ERROR(call(store::request(store::kGet, key, store::encode_i64(timeout.count())),
                               timeout + kReplyMargin, value, &timed_out));
    if (timed_out) return Status::not_found("timeout waiting for " + key);
    return Status::OK();
  }
  Status get_all(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                 std::vector<std::optional<std::string>>* values) override {
    std::string body;
    HYDRO_RETURN_IF_ERROR(
        call(store::request(store::kGetAll, store::encode_list(keys), store::encode_i64(timeout.count())),
             timeout + kReplyMargin, &body, nullptr));
    std::vector<std::string> found;
    if (!store::decode_list(body, &found) || found.size() != keys.size())
      return Status::io("the ranks' store at " + where_ + ": a malformed reply to a wait for " +
                        std::to_string(keys.size()) + " keys");
    values->assign(keys.size(), std::nullopt);
    Status first_missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (found[i] == "-") {
        if (first_missing.ok()) first_missing = Status::not_found("timeout waiting for " + keys[i]);
      } else if (!found[i].empty() && found[i][0] == '+') {
        (*values)[i] = found[i].substr(1);
      } else {
        return Status::io("the ranks' store at " + where_ + ": a malformed value for " + keys[i]);
      }
    }
    return first_missing;
  }
  Status add(const std::string& key, int64_t delta, int64_t* value) override {
    std::string body;
    HYDRO_RETURN_IF_ERROR(
        call(store::request(store::kAdd, key, store::encode_i64(delta)), kReplyMargin, &body, nullptr));
    if (!store::decode_i64(body, value))
      return Status::io("the ranks' store at " + where_ + ": a malformed reply to add " + key);
    return Status::OK();
  }
  Status remove(const std::string& key) override {
    std::string body;
    return call(store::request(store::kDelete, key, ""), kReplyMargin, &body, nullptr);
  }

 private:
  // Sends a request and reads its reply within `budget` of running time.
  Status call(const std::string& req, Clock::duration budget, std::string* body, bool* timed_out) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string reply;
    store::Deadline deadline(budget);
    Status s = store::send_frame(fd_, req, deadline);
    if (s.ok()) s = store::recv_frame(fd_, store::kMaxFrame, deadline, &reply);
    if (!s.ok()) return Status::io("the ranks' store at " + where_ + ": " + s.message());
    if (reply.empty()) return Status::io("the ranks' store at " + where_ + ": an empty reply");
    if (reply[0] == store::kTimeout && timed_out) {
      *timed_out = true;
      return Status::OK();
    }
    if (reply[0] != store::kOk) return Status::io("the ranks' store at " + where_ + ": " + reply.substr(1));
    body->assign(reply, 1, std::string::npos);
    return Status::OK();
  }
  std::mutex mu_;
  int fd_;
  std::string where_;
};

// One connection attempt to any address of host:port, within the deadline. -1 and errno set on failure.
int dial(const std::string& host, int port, store::Deadline& deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *error = std::string("cannot resolve ") + host + ": " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv{};
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline.left()).count();
    tv.tv_sec = std::max<long long>(1, left / 1000000);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // bounds connect()
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      *error = std::string("connect: ") + std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

Status connect_tcp_store(const std::string& host, int port, const std::string& scope, std::chrono::milliseconds timeout,
                         std::unique_ptr<RankStore>* out) {
  const std::string where = host + ":" + std::to_string(port);
  store::Deadline deadline(timeout);
  std::string last = "no attempt";
  do {
    int fd = dial(host, port, deadline, &last);
    if (fd >= 0) {
      bool refused = false;
      store::Deadline handshake(std::min<Clock::duration>(deadline.left(), std::chrono::seconds(30)));
      Status s = store::handshake_client(fd, scope, handshake, &refused);
      if (s.ok()) {
        *out = std::make_unique<TcpStoreClient>(fd, where);
        return Status::OK();
      }
      ::close(fd);
      if (refused) return Status::io(s.message() + " (at " + where + ")");
      last = s.message();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (!deadline.passed());
  return Status::io("cannot reach the ranks' store at " + where + " within " + std::to_string(timeout.count() / 1000) +
                    " s: " + last);
}

Status open_job_store(const DistEnv& dist, std::chrono::seconds timeout, std::unique_ptr<TcpStoreServer>* server,
                      std::unique_ptr<RankStore>* client) {
  const int port = dist.store_port();
  const std::string scope = store_scope_from_env();
  Status st;
  if (dist.rank == 0) st = TcpStoreServer::start(port, scope, server);
  if (st.ok()) st = connect_tcp_store(dist.master_addr, port, scope, timeout, client);
  if (st.ok()) return st;
  return Status::io(st.message() + " (the ranks' store: MASTER_ADDR, MASTER_PORT + 1, " + scope +
                    ", HYDRO_STORE_TIMEOUT=" + std::to_string(timeout.count()) + " s)");
}

std::string store_scope_from_env() {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  return std::string("job ") + (job && *job ? job : "-") + " step " + (step && *step ? step : "-");
}

}  // namespace hydro
