// hydro-launch's end of the readiness pipe (hydro/launch_ready.h): what the program's hydro runtime
// says there. Up: its handlers are installed, a checkpoint-and-exit may be sent. Closed: its
// training is over, none may. The end of the pipe with neither said: the program has no runtime.
#pragma once

#include <string>

namespace hydro::launcher {

class RuntimePipe {
 public:
  enum class State { starting, up, closed, no_runtime };

  RuntimePipe() = default;
  ~RuntimePipe() { close(); }
  RuntimePipe(const RuntimePipe&) = delete;
  RuntimePipe& operator=(const RuntimePipe&) = delete;

  // A new pipe for a new run of the program (close-on-exec both ends); *write_end goes to the
  // child, and is the caller's to close once the child has it.
  bool open(int* write_end, std::string* error);
  void close();
  // The read end while more may come, for poll; -1 once the pipe has ended.
  int fd() const { return ended_ ? -1 : fd_; }
  // Reads whatever the program has written, without blocking; the last byte sets the state.
  void read_available();
  State state() const { return state_; }

 private:
  int fd_ = -1;  // open until the end of the run (a late writer gets no SIGPIPE)
  bool ended_ = false;
  State state_ = State::starting;
};

}  // namespace hydro::launcher
