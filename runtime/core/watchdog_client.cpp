#include "hydro/watchdog_client.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "hydro/log.h"
#include "hydro/timer_table.h"

namespace hydro {
namespace {

std::string fifo_from_env() {
  for (const char* name : {"HYDRO_WATCHDOG_FILE", "TORCHELASTIC_TIMER_FILE"}) {
    const char* v = std::getenv(name);
    if (v && *v) return v;
  }
  return "";
}

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

WatchdogClient::WatchdogClient() : WatchdogClient(fifo_from_env()) {}

WatchdogClient::WatchdogClient(std::string fifo_path, int signal) : path_(std::move(fifo_path)), signal_(signal) {}

Status WatchdogClient::arm(const std::string& scope_id, double seconds) {
  if (!enabled()) return Status::OK();
  if (!(seconds > 0)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", seconds);
    return Status::invalid_argument("watchdog timer '" + scope_id + "': " + text +
                                    " s is not a positive number of seconds");
  }
  TimerRequest r;
  r.pid = ::getpid();
  r.scope_id = scope_id;
  r.expiration_time = wall_now() + seconds;  // the protocol's clock: wall-clock epoch seconds
  r.signal = signal_;
  return send(format_timer_request(r));
}

Status WatchdogClient::disarm(const std::string& scope_id) {
  if (!enabled()) return Status::OK();
  TimerRequest r;
  r.pid = ::getpid();
  r.scope_id = scope_id;
  r.expiration_time = -1;
  r.signal = 0;
  return send(format_timer_request(r));
}

Status WatchdogClient::send(const std::string& json) {
  const std::string line = json + "\n";
  if (line.size() > PIPE_BUF)
    return Status::invalid_argument("watchdog file " + path_ + ": request longer than " + std::to_string(PIPE_BUF) +
                                    " bytes (shorten the scope_id): " + json);
  // Non-blocking, like FileTimerClient: with no reader (hydro-launch gone) open fails with ENXIO
  // instead of blocking the worker.
  int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string hint = err == ENXIO ? " (no hydro-launch --watchdog-file is reading it)" : "";
    return Status::from_errno(err, "watchdog file " + path_ + hint);
  }
  // One write of at most PIPE_BUF bytes into a FIFO is atomic: lines from workers never interleave.
  ssize_t n;
  do {
    n = ::write(fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n < 0) return Status::from_errno(err, "watchdog file " + path_ + ": write");
  if (static_cast<size_t>(n) != line.size())
    return Status::io("watchdog file " + path_ + ": short write of " + std::to_string(n) + " bytes");
  return Status::OK();
}

ScopedTimer::ScopedTimer(WatchdogClient& client, std::string scope_id, double seconds)
    : client_(client), scope_id_(std::move(scope_id)) {
  status_ = client_.arm(scope_id_, seconds);
  if (!status_.ok()) log("watchdog: cannot arm timer '" + scope_id_ + "': " + status_.message());
}

const Status& ScopedTimer::rearm(double seconds) {
  status_ = client_.arm(scope_id_, seconds);
  if (!status_.ok()) log("watchdog: cannot re-arm timer '" + scope_id_ + "': " + status_.message());
  return status_;
}

ScopedTimer::~ScopedTimer() {
  if (!status_.ok()) return;
  Status st = client_.disarm(scope_id_);
  if (!st.ok()) log("watchdog: cannot disarm timer '" + scope_id_ + "': " + st.message());
}

}  // namespace hydro
