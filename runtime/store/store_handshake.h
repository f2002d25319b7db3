// The ranks' store's handshake: both ends prove with MUNGE that they run as the same uid and serve
// the same job step, over nonces fresh to this connection (a recorded credential is refused).
//
//   server -> client   "hydro-store/1 <server nonce> <server uid>"
//   client -> server   MUNGE("hydro-store/1 client|<scope>|<server nonce>|<client nonce>")
//   server -> client   'K' MUNGE("hydro-store/1 server|<scope>|<client nonce>")
//                   or 'E' <why> (same uid, another scope), or nothing (anyone else)
#pragma once

#include <string>

#include "store_wire.h"

namespace hydro::store {

// OK when the client proved to be this uid and `scope`; otherwise says why it was refused.
Status handshake_server(int fd, const std::string& scope, Deadline& deadline);
// OK when the server proved to be this uid and `scope`. *refused is set when the server turned
// this client away on purpose (another scope): retrying is pointless.
Status handshake_client(int fd, const std::string& scope, Deadline& deadline, bool* refused);

}  // namespace hydro::store
