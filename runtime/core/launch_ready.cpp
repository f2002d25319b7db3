#include "hydro/launch_ready.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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
void write_byte(int fd) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  ssize_t n;
  do {
    n = ::write(fd, "r", 1);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EPIPE) {
    const struct timespec zero = {0, 0};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

void tell_launcher_ready() {
  unsigned long long fd = 0, ino = 0;
  const bool have_fd = parse_number(std::getenv(kLaunchReadyEnv), &fd);
  const bool have_ino = parse_number(std::getenv(kLaunchReadyInoEnv), &ino);
  if (!std::getenv(kLaunchReadyEnv)) return;
  ::unsetenv(kLaunchReadyEnv);
  ::unsetenv(kLaunchReadyInoEnv);
  if (!have_fd || !have_ino || fd < 3 || fd > (1u << 20)) return;
  const int d = static_cast<int>(fd);
  // Only that pipe, still open for writing: never write into, or close, an unrelated descriptor.
  struct stat st;
  if (::fstat(d, &st) != 0 || !S_ISFIFO(st.st_mode) || st.st_ino != ino) return;
  int flags = ::fcntl(d, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_WRONLY) return;
  write_byte(d);
  ::close(d);
}

}  // namespace hydro
