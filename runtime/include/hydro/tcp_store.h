// The ranks' store over TCP (hydro::store, no libtorch): rank 0 serves it at MASTER_ADDR and
// MASTER_PORT + 1, and every rank, rank 0 included, is its client.
//
// Who may use it: a connection is served only after a mutual MUNGE handshake (store_handshake.h)
// shows that both ends run as the same uid and belong to the same job step. Anyone else, another
// user on the node or the network, is disconnected before a request is read: they cannot read,
// write, add to or delete a key. They can still take a connection slot for up to 10 s, or keep
// the port busy before rank 0 binds it (rank 0 then fails, naming the port): denial, not control.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "hydro/dist_env.h"
#include "hydro/rank_store.h"

namespace hydro {

class TcpStoreServer {
 public:
  // Listens on every interface at `port` (0: any free port; see port()). `scope` names the job
  // step ("job 12 step 0"); clients of another scope are refused with a message naming both.
  static Status start(int port, std::string scope, std::unique_ptr<TcpStoreServer>* out);
  ~TcpStoreServer();  // disconnects every client and joins every thread
  int port() const;

  struct State;

 private:
  explicit TcpStoreServer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// Connects to the store at host:port, retrying a refused connection until `timeout` passes;
// fails at once when the server is not this uid's or serves another scope.
Status connect_tcp_store(const std::string& host, int port, const std::string& scope, std::chrono::milliseconds timeout,
                         std::unique_ptr<RankStore>* out);

// A job's store at MASTER_ADDR:MASTER_PORT + 1: rank 0 starts *server, every rank connects *client.
// Errors name the address, the scope and HYDRO_STORE_TIMEOUT.
Status open_job_store(const DistEnv& dist, std::chrono::seconds timeout, std::unique_ptr<TcpStoreServer>* server,
                      std::unique_ptr<RankStore>* client);

// The scope of this process's job step, from Slurm's environment ("job - step -" outside Slurm).
std::string store_scope_from_env();

}  // namespace hydro
