#include "hydro/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>

namespace hydro {

void log_line(const std::string& who, const std::string& message) {
  struct timeval tv;
  ::gettimeofday(&tv, nullptr);
  struct tm tm;
  ::localtime_r(&tv.tv_sec, &tm);
  char prefix[96];
  std::snprintf(prefix, sizeof prefix, "%s[%d] %02d:%02d:%02d.%03ld: ", who.c_str(), static_cast<int>(::getpid()),
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(tv.tv_usec / 1000));
  std::string line = prefix + message + "\n";
  const char* p = line.data();
  size_t n = line.size();
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

Status warn_if_durability_uncertain(Status st) {
  if (st.code() != Code::durability_uncertain) return st;
  log("warning: " + st.message());
  return Status::OK();
}

}  // namespace hydro
