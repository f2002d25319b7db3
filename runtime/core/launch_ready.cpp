#include "hydro/launch_ready.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>

namespace hydro {
namespace {

bool parse_number(const char* v, unsigned long long* out) {
  if (!v || *v < '0' || *v > '9') return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtoull(v, &end, 10);
  return errno == 0 && *end == '\0';
}

// Writes one byte with SIGPIPE blocked on this thread; a pending SIGPIPE it raised is consumed.
// False when the reader is gone.
bool write_byte(int fd, char byte) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  ssize_t n;
  do {
    n = ::write(fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EPIPE) {
    const struct timespec zero = {0, 0};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return n == 1;
}

// The pipe this process took from the variables, and the process that took it (a forked child,
// a DataLoader worker, inherits the number but speaks for nobody).
struct TakenPipe {
  std::mutex mu;
  int fd = -1;
  std::string socket;  // the report socket's name, when the pipe did not reach this process
  pid_t owner = -1;
};

TakenPipe& taken() {
  static TakenPipe p;
  return p;
}

// The report socket's name from its variable (unset then); empty when none, or not a name.
std::string take_socket_from_env() {
  const char* v = std::getenv(kLaunchSocketEnv);
  std::string name = v ? v : "";
  ::unsetenv(kLaunchSocketEnv);
  sockaddr_un fits;
  return launch_socket_address(name, &fits) ? name : "";
}

// The write end named by the variables, once they are checked; -1 if none. Unsets them.
int take_pipe_from_env() {
  unsigned long long fd = 0, ino = 0;
  const bool have_fd = parse_number(std::getenv(kLaunchReadyEnv), &fd);
  const bool have_ino = parse_number(std::getenv(kLaunchReadyInoEnv), &ino);
  if (!std::getenv(kLaunchReadyEnv)) return -1;
  ::unsetenv(kLaunchReadyEnv);
  ::unsetenv(kLaunchReadyInoEnv);
  if (!have_fd || !have_ino || fd < 3 || fd > (1u << 20)) return -1;
  const int d = static_cast<int>(fd);
  // Only that pipe, still open for writing: never write into, or close, an unrelated descriptor.
  struct stat st;
  if (::fstat(d, &st) != 0 || !S_ISFIFO(st.st_mode) || st.st_ino != ino) return -1;
  int flags = ::fcntl(d, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_WRONLY) return -1;
  ::fcntl(d, F_SETFD, FD_CLOEXEC);
  return d;
}

// One datagram to the report socket at `path`, waiting at most a second for room in its queue
// (a burst of many workers' reports); the kernel adds who sent it.
void send_report(const std::string& path, const std::string& message) {
  sockaddr_un addr;
  if (!launch_socket_address(path, &addr)) return;
  int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  const struct timeval second = {1, 0};
  ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &second, sizeof second);
  ssize_t n;
  do {
    n = ::sendto(s, message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (n < 0 && errno == EINTR);
  ::close(s);
}

// Under p.mu: writes `byte` to the process's own pipe (closed once the reader is gone), or sends
// it on the report socket, with this worker's LOCAL_WORLD_SIZE after kRuntimeUp.
void tell(TakenPipe& p, char byte) {
  if (p.owner != ::getpid()) return;
  if (p.fd < 0) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    if (!p.socket.empty()) send_report(p.socket, std::string(1, byte) + (byte == kRuntimeUp && local ? local : ""));
    return;
  }
  if (write_byte(p.fd, byte)) return;
  ::close(p.fd);
  p.fd = -1;
}

}  // namespace

bool launch_socket_address(const std::string& path, sockaddr_un* out) {
  *out = sockaddr_un{};
  out->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof out->sun_path) return false;
  path.copy(out->sun_path, path.size());
  return true;
}

void tell_launcher_ready() {
  TakenPipe& p = taken();
  std::lock_guard<std::mutex> lock(p.mu);
  // A new launcher's pipe, or its socket where the pipe did not reach this process, replaces what
  // the process took before.
  std::string socket = take_socket_from_env();
  if (int d = take_pipe_from_env(); d >= 0 || !socket.empty()) {
    if (p.fd >= 0 && p.owner == ::getpid()) ::close(p.fd);
    p.fd = d;
    p.socket = d >= 0 ? "" : socket;
    p.owner = ::getpid();
  }
  tell(p, kRuntimeUp);
}

void tell_launcher_closed() {
  TakenPipe& p = taken();
  std::lock_guard<std::mutex> lock(p.mu);
  tell(p, kRuntimeClosed);
}

void tell_launcher_exiting() {
  TakenPipe& p = taken();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.fd < 0) tell(p, kRuntimeExiting);
}

}  // namespace hydro
