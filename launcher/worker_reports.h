// hydro-launch's report socket: what the hydro runtimes of a program's workers say when the
// readiness pipe (runtime_pipe.h) did not reach them, as torchrun's workers, started with their
// descriptors closed. A Unix datagram socket in a private directory (0700: no other user may send
// to it, nor fill its queue), named in HYDRO_LAUNCH_SOCKET; each datagram carries its sender's pid
// and uid, from the kernel. One from another uid, or from a process outside the program's tree
// that has not reported before, is dropped.
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

  // Makes the directory, binds the socket and names it in the environment, for the program to
  // inherit. The destructor removes both; a directory of a hydro-launch that was killed is removed
  // by the next one of its user on the node.
  bool open(std::string* error);
  int fd() const { return fd_; }
  // A new run of the program: what its workers said is forgotten.
  void reset();
  // Reads the datagrams waiting (at most kMaxPerRead), without blocking; `ours(pid)`: whether
  // the sender is the program's. Returns what was dropped (a line for the log), empty when none.
  std::string read_available(const std::function<bool(pid_t)>& ours);
  // starting until as many workers as one of them counts (its LOCAL_WORLD_SIZE) said up; closed
  // once each that said up closed.
  RuntimePipe::State state() const;
  // Workers that said they checkpointed to exit for a requeue.
  int exiting() const;
  int up() const;
  // The workers that said up and have not closed since.
  std::vector<pid_t> open_workers() const;
  // The workers that said up since the last call (and not before).
  std::vector<pid_t> take_new_up();

  // One datagram from `pid` (public for the tests): its byte, then digits after kRuntimeUp. A new
  // kRuntimeUp (a restarted runtime) forgets an earlier kRuntimeExiting.
  void take(pid_t pid, const std::string& message);

 private:
  struct Worker {
    bool up = false, closed = false, exiting = false;
  };
  static constexpr int kMaxPerRead = 256;
  std::string dir_;
  int fd_ = -1;
  int expected_ = 1;  // the largest LOCAL_WORLD_SIZE a worker gave
  std::map<pid_t, Worker> workers_;
  std::vector<pid_t> new_up_;
};

}  // namespace hydro::launcher
