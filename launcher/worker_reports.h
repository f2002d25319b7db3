// hydro-launch's report socket: what the hydro runtimes of a program's workers say when the
// readiness pipe (runtime_pipe.h) did not reach them, as torchrun's workers, started with their
// descriptors closed. An abstract Unix datagram socket, named in HYDRO_LAUNCH_SOCKET with a random
// part; each datagram carries its sender's pid and uid, from the kernel. One from another user, or
// from a process outside the program's tree, is dropped: another user on the node may send, and
// is never heard.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime_pipe.h"

namespace hydro::launcher {

class WorkerReports {
 public:
  WorkerReports() = default;
  ~WorkerReports();
  WorkerReports(const WorkerReports&) = delete;
  WorkerReports& operator=(const WorkerReports&) = delete;

  // Binds the socket and names it in the environment, for the program to inherit.
  bool open(std::string* error);
  int fd() const { return fd_; }
  // A new run of the program: what its workers said is forgotten.
  void reset();
  // Reads every datagram waiting, without blocking; `ours(pid)`: whether the sender is the
  // program's. Returns what was dropped (a line for the log), empty when nothing was.
  std::string read_available(const std::function<bool(pid_t)>& ours);
  // starting until as many workers as one of them counts (its LOCAL_WORLD_SIZE) said up; closed
  // once each that said up closed.
  RuntimePipe::State state() const;
  // Workers that said they checkpointed to exit for a requeue.
  int exiting() const;
  int up() const;
  // The workers that said up since the last call (and not before).
  std::vector<pid_t> take_new_up();

  // One datagram from `pid` (public for the tests): its byte, then digits after kRuntimeUp.
  void take(pid_t pid, const std::string& message);

 private:
  struct Worker {
    bool up = false, closed = false, exiting = false;
  };
  int fd_ = -1;
  int expected_ = 1;  // the largest LOCAL_WORLD_SIZE a worker gave
  std::map<pid_t, Worker> workers_;
  std::vector<pid_t> new_up_;
};

}  // namespace hydro::launcher
