// A stand-in for another process at the ranks' store, for the store's tests (unit and on Slurm).
//   hydro_store_probe connect HOST PORT SCOPE  -- joins the store; if let in, adds 12 to the vote
//                                                 counters of rounds 0..99 and sets "probe": exit 0;
//                                                 refused or unreachable: the reason, exit 1
//   hydro_store_probe attack HOST PORT SCOPE   -- the same, but speaking the handshake by hand with
//                                                 its own MUNGE credential, whatever uid the server
//                                                 claims: what an attacker's client would do
//   hydro_store_probe serve SCOPE              -- serves a store on a free port, prints the port,
//                                                 and serves until its stdout's reader goes away
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include "../../runtime/store/munge_auth.h"
#include "../../runtime/store/store_wire.h"
#include "hydro/tcp_store.h"

namespace {

using namespace hydro;

// A client that ignores the server's claimed uid and sends a valid credential of its own uid.
int attack(const char* host, const char* port, const std::string& scope) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host, port, &hints, &res) != 0) return 2;
  int fd = ::socket(res->ai_family, SOCK_STREAM, 0);
  const int connected = ::connect(fd, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (connected != 0) return 2;
  store::Deadline deadline(std::chrono::seconds(10));
  std::string hello, cred, reply;
  Status s = store::recv_frame(fd, store::kMaxHandshake, deadline, &hello);
  std::string ns = hello.substr(hello.find(' ') + 1);
  ns = ns.substr(0, ns.find(' '));
  if (s.ok()) s = munge_seal(std::string(store::kProtocol) + " client|" + scope + "|" + ns + "|00", &cred);
  if (s.ok()) s = store::send_frame(fd, cred, deadline);
  if (s.ok()) s = store::recv_frame(fd, store::kMaxHandshake, deadline, &reply);
  if (!s.ok() || reply.empty() || reply[0] != store::kOk) {
    std::cout << "refused: " << (s.ok() ? reply : s.message()) << std::endl;
    return 1;
  }
  s = store::send_frame(fd, store::request(store::kAdd, "hydro/0/vote", store::encode_i64(12)), deadline);
  if (s.ok()) s = store::recv_frame(fd, store::kMaxFrame, deadline, &reply);
  std::cout << (s.ok() ? "let in" : s.message()) << std::endl;
  return s.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hydro;
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc == 3) {
    std::unique_ptr<TcpStoreServer> server;
    Status s = TcpStoreServer::start(0, argv[2], &server);
    if (!s.ok()) {
      std::cerr << s.message() << "\n";
      return 1;
    }
    std::cout << server->port() << std::endl;
    pollfd out{1, 0, 0};  // until the reader of stdout goes away (POLLERR on a pipe)
    while (::poll(&out, 1, -1) >= 0 && !(out.revents & (POLLERR | POLLHUP))) {
    }
    return 0;
  }
  if (mode == "attack" && argc == 5) return attack(argv[2], argv[3], argv[4]);
  if (mode != "connect" || argc != 5) {
    std::cerr << "usage: hydro_store_probe connect|attack HOST PORT SCOPE | serve SCOPE\n";
    return 2;
  }
  std::unique_ptr<RankStore> store;
  Status s = connect_tcp_store(argv[2], std::stoi(argv[3]), argv[4], std::chrono::seconds(3), &store);
  if (!s.ok()) {
    std::cout << s.message() << std::endl;
    return 1;
  }
  int64_t v = 0;
  for (int r = 0; r < 100 && s.ok(); ++r) s = store->add("hydro/" + std::to_string(r) + "/vote", 12, &v);
  if (s.ok()) s = store->set("probe", "in");
  std::cout << (s.ok() ? "let in" : s.message()) << std::endl;
  return s.ok() ? 0 : 1;
}
