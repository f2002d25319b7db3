#include "hydro/launch_ready.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace hydro {

void tell_launcher_ready() {
  const char* v = std::getenv(kLaunchReadyEnv);
  if (!v || !*v) return;
  char* end = nullptr;
  long fd = std::strtol(v, &end, 10);
  ::unsetenv(kLaunchReadyEnv);
  if (*end != '\0' || fd < 3 || fd > 1 << 20) return;
  // Only a pipe that is still open for writing: never write into an unrelated descriptor.
  int flags = ::fcntl(static_cast<int>(fd), F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_WRONLY) return;
  ssize_t n;
  do {
    n = ::write(static_cast<int>(fd), "r", 1);
  } while (n < 0 && errno == EINTR);
  ::close(static_cast<int>(fd));
}

}  // namespace hydro
