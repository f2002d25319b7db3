#include "runtime_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hydro/launch_ready.h"

namespace hydro::launcher {

bool RuntimePipe::open(int* write_end, std::string* error) {
  close();
  int p[2] = {-1, -1};
  if (::pipe2(p, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
  fd_ = p[0];
  *write_end = p[1];
  return true;
}

void RuntimePipe::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ended_ = false;
  state_ = State::starting;
}

void RuntimePipe::read_available() {
  char buf[64];
  while (fd_ >= 0 && !ended_) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more now
    if (n == 0) {
      ended_ = true;
      if (state_ == State::starting) state_ = State::no_runtime;
      return;
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == kRuntimeUp) state_ = State::up;
      if (buf[i] == kRuntimeClosed) state_ = State::closed;
    }
  }
}

}  // namespace hydro::launcher
