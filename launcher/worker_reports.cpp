#include "worker_reports.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hydro/launch_ready.h"

namespace hydro::launcher {
namespace {

// hydro-launch.PID.RANDOM: unguessable, so no other process can bind it first.
std::string socket_name() {
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) return "";
  std::string name = "hydro-launch." + std::to_string(::getpid()) + ".";
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    name += hex;
  }
  return name;
}

}  // namespace

WorkerReports::~WorkerReports() {
  if (fd_ >= 0) ::close(fd_);
}

bool WorkerReports::open(std::string* error) {
  const std::string name = socket_name();
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (name.empty() || fd_ < 0) {
    *error = std::string("the workers' report socket: ") + std::strerror(errno);
    return false;
  }
  const int on = 1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  name.copy(addr.sun_path + 1, name.size());  // sun_path[0] = 0: the abstract namespace
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    *error = "the workers' report socket @" + name + ": " + std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    return false;
  }
  ::setenv(kLaunchSocketEnv, name.c_str(), 1);
  return true;
}

void WorkerReports::reset() {
  workers_.clear();
  new_up_.clear();
  expected_ = 1;
}

std::string WorkerReports::read_available(const std::function<bool(pid_t)>& ours) {
  std::string dropped;
  for (;;) {
    char buf[32];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    iovec iov{buf, sizeof buf};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = fd_ < 0 ? -1 : ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return dropped;  // EAGAIN: nothing more now
    const cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS) continue;
    ucred who;
    std::memcpy(&who, CMSG_DATA(c), sizeof who);
    if (who.uid != ::getuid() || !ours(who.pid)) {
      dropped = "a report from pid " + std::to_string(who.pid) + " (uid " + std::to_string(who.uid) +
                "), not a process of the program: dropped";
      continue;
    }
    take(who.pid, std::string(buf, static_cast<size_t>(n)));
  }
}

void WorkerReports::take(pid_t pid, const std::string& message) {
  if (message.empty()) return;
  Worker& w = workers_[pid];
  if (message[0] == kRuntimeUp) {
    if (!w.up) new_up_.push_back(pid);
    w.up = true;
    w.closed = false;
    const int local = std::atoi(message.c_str() + 1);
    if (local > expected_ && local <= 1 << 16) expected_ = local;
  }
  if (message[0] == kRuntimeClosed) w.closed = true;
  if (message[0] == kRuntimeExiting) w.exiting = true;
}

RuntimePipe::State WorkerReports::state() const {
  int said_up = 0, open = 0;
  for (const auto& [pid, w] : workers_) {
    said_up += w.up;
    open += w.up && !w.closed;
  }
  if (said_up < expected_) return RuntimePipe::State::starting;
  return open ? RuntimePipe::State::up : RuntimePipe::State::closed;
}

int WorkerReports::exiting() const {
  int n = 0;
  for (const auto& [pid, w] : workers_) n += w.exiting;
  return n;
}

std::vector<pid_t> WorkerReports::take_new_up() {
  std::vector<pid_t> up;
  up.swap(new_up_);
  return up;
}

int WorkerReports::up() const {
  int n = 0;
  for (const auto& [pid, w] : workers_) n += w.up;
  return n;
}

}  // namespace hydro::launcher
