#include "store_handshake.h"

#include <unistd.h>

#include <vector>

#include "hydro/text.h"
#include "munge_auth.h"

namespace hydro::store {
namespace {

// Opens a peer's credential and checks that it comes from this uid.
Status open_from_same_uid(const std::string& credential, const char* who, std::string* payload) {
  uid_t uid = 0;
  Status s = munge_open(credential, payload, &uid);
  if (!s.ok()) return Status::io(std::string("the ranks' store: refused ") + who + ": " + s.message());
  if (uid != ::geteuid())
    return Status::io(std::string("the ranks' store: refused ") + who + " running as uid " + std::to_string(uid) +
                      ": only uid " + std::to_string(::geteuid()) + " may use this job's store");
  return Status::OK();
}

}  // namespace

Status handshake_server(int fd, const std::string& scope, Deadline& deadline) {
  std::string ns, credential, payload;
  HYDRO_RETURN_IF_ERROR(nonce(&ns));
  HYDRO_RETURN_IF_ERROR(
      send_frame(fd, std::string(kProtocol) + " " + ns + " " + std::to_string(::geteuid()), deadline));
  HYDRO_RETURN_IF_ERROR(recv_frame(fd, kMaxHandshake, deadline, &credential));
  HYDRO_RETURN_IF_ERROR(open_from_same_uid(credential, "a client", &payload));
  std::vector<std::string> f = split(payload, '|');
  if (f.size() != 4 || f[0] != std::string(kProtocol) + " client" || f[2] != ns)
    return Status::io("the ranks' store: refused a client whose credential was not made for this connection");
  if (f[1] != scope) {
    std::string why = "this store serves " + scope + ", not " + f[1];
    (void)send_frame(fd, std::string(1, kError) + why, deadline);
    return Status::io("the ranks' store: refused a client of another job step: " + why);
  }
  std::string mine;
  HYDRO_RETURN_IF_ERROR(munge_seal(std::string(kProtocol) + " server|" + scope + "|" + f[3], &mine));
  return send_frame(fd, std::string(1, kOk) + mine, deadline);
}

Status handshake_client(int fd, const std::string& scope, Deadline& deadline, bool* refused) {
  *refused = false;
  std::string hello, nc, credential, reply, payload;
  HYDRO_RETURN_IF_ERROR(recv_frame(fd, kMaxHandshake, deadline, &hello));
  std::vector<std::string> h = split(hello, ' ');
  if (h.size() != 3 || h[0] != kProtocol)
    return Status::io("the ranks' store: the server does not speak " + std::string(kProtocol));
  // The uid it claims is checked by its credential below; a wrong one ends the handshake early,
  // with the reason, instead of retrying until the store timeout.
  if (h[2] != std::to_string(::geteuid())) {
    *refused = true;
    return Status::io("the ranks' store: refused the server running as uid " + h[2] + ": only uid " +
                      std::to_string(::geteuid()) + " may serve this job's store (another user holds the port?)");
  }
  HYDRO_RETURN_IF_ERROR(nonce(&nc));
  Status sealed = munge_seal(std::string(kProtocol) + " client|" + scope + "|" + h[1] + "|" + nc, &credential);
  if (!sealed.ok()) {
    *refused = true;  // this node's munged: trying again will not help
    return sealed;
  }
  HYDRO_RETURN_IF_ERROR(send_frame(fd, credential, deadline));
  HYDRO_RETURN_IF_ERROR(recv_frame(fd, kMaxHandshake, deadline, &reply));
  if (!reply.empty() && reply[0] == kError) {
    *refused = true;
    return Status::io("the ranks' store refused this rank: " + reply.substr(1));
  }
  if (reply.empty() || reply[0] != kOk) return Status::io("the ranks' store: a malformed handshake reply");
  Status s = open_from_same_uid(reply.substr(1), "the server", &payload);
  if (!s.ok()) {
    *refused = true;
    return s;
  }
  if (payload != std::string(kProtocol) + " server|" + scope + "|" + nc) {
    *refused = true;
    return Status::io("the ranks' store: refused a server whose credential was not made for this connection");
  }
  return Status::OK();
}

}  // namespace hydro::store
