#include "worker_reports.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "hydro/launch_ready.h"

namespace hydro::launcher {
namespace {

constexpr const char* kDirPrefix = "hydro-launch.";
constexpr const char* kSocketName = "reports";

// The directories of hydro-launches of this user that are gone (SIGKILLed: a job killed while
// suspended), by the pid in their name: their socket, then themselves. Another user's, a link, or
// a live pid's are left alone (nothing is followed: fstatat and unlinkat on `base`).
void sweep_stale(const std::string& base) {
  DIR* d = ::opendir(base.c_str());
  if (!d) return;
  const int fd = ::dirfd(d);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kDirPrefix, 0) != 0) continue;
    const long pid = std::atol(name.c_str() + std::strlen(kDirPrefix));
    struct stat st;
    if (pid <= 0 || ::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::getuid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)
      continue;
    const int sub = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    ::unlinkat(sub, kSocketName, 0);
    ::close(sub);
    ::unlinkat(fd, name.c_str(), AT_REMOVEDIR);
  }
  ::closedir(d);
}

// A private directory (0700, mkdtemp) for the socket, hydro-launch.PID.XXXXXX under $TMPDIR where
// its path fits a Unix socket's name, else /tmp: only the job's user may send to it.
std::string private_dir(std::string* error) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp == '/' ? tmp : "/tmp";
  if (base.size() > 60) base = "/tmp";
  sweep_stale(base);
  std::string tmpl = base + "/" + kDirPrefix + std::to_string(::getpid()) + ".XXXXXX";
  if (!::mkdtemp(tmpl.data())) {
    *error = "the workers' report socket: mkdtemp in " + base + ": " + std::strerror(errno);
    return "";
  }
  return tmpl;
}

}  // namespace

WorkerReports::~WorkerReports() {
  if (fd_ >= 0) ::close(fd_);
  if (dir_.empty()) return;
  ::unlink((dir_ + "/" + kSocketName).c_str());
  ::rmdir(dir_.c_str());
}

bool WorkerReports::open(std::string* error) {
  dir_ = private_dir(error);
  if (dir_.empty()) return false;
  const std::string path = dir_ + "/" + kSocketName;
  sockaddr_un addr;
  if (!launch_socket_address(path, &addr)) {
    *error = "the workers' report socket " + path + ": the path is too long for a socket";
    return false;
  }
  const int on = 1;
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0 || ::setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *error = "the workers' report socket " + path + ": " + std::strerror(errno);
    return false;
  }
  ::setenv(kLaunchSocketEnv, path.c_str(), 1);
  return true;
}

void WorkerReports::reset() {
  workers_.clear();
  new_up_.clear();
  expected_ = 1;
}

std::string WorkerReports::read_available(const std::function<bool(pid_t)>& ours) {
  std::string dropped;
  for (int taken = 0; taken < kMaxPerRead; ++taken) {
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
    if (n < 0) break;  // EAGAIN: nothing more now
    const cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS) continue;
    ucred who;
    std::memcpy(&who, CMSG_DATA(c), sizeof who);
    // A worker already heard from passes even once it has exited, and is out of the tree: its
    // last report (that it checkpointed to exit) may be read after torchrun has reaped it.
    if (who.uid != ::getuid() || (!workers_.count(who.pid) && !ours(who.pid))) {
      dropped = "a report from pid " + std::to_string(who.pid) + " (uid " + std::to_string(who.uid) +
                "), not a process of the program: dropped";
      continue;
    }
    take(who.pid, std::string(buf, static_cast<size_t>(n)));
  }
  return dropped;
}

void WorkerReports::take(pid_t pid, const std::string& message) {
  if (message.empty()) return;
  Worker& w = workers_[pid];
  if (message[0] == kRuntimeUp) {
    if (!w.up) new_up_.push_back(pid);
    w.up = true;
    w.closed = w.exiting = false;
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

std::vector<pid_t> WorkerReports::open_workers() const {
  std::vector<pid_t> open;
  for (const auto& [pid, w] : workers_)
    if (w.up && !w.closed) open.push_back(pid);
  return open;
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
