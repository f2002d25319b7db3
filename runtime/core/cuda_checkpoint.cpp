#include "hydro/cuda_checkpoint.h"

#include <dlfcn.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

extern char** environ;

namespace hydro {

namespace {

// posix_spawn, not fork: the caller is a training process with many threads, and its child may
// run nothing but exec. The helper's stdin and stdout are one end of a socket pair; no signal of
// the caller's mask or handlers passes on.
Status spawn(const std::vector<std::string>& argv, int child_fd, pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_fd, 0);
  posix_spawn_file_actions_adddup2(&actions, child_fd, 1);
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int rc = ::posix_spawn(pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::from_errno(rc, "cannot start " + argv[0]);
  return Status::OK();
}

}  // namespace

Status CudaCheckpointHelper::start(const std::string& helper, pid_t target, const std::string& libcuda,
                                   std::unique_ptr<CudaCheckpointHelper>* out) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return Status::from_errno(errno, "socketpair");
  std::vector<std::string> argv = {helper, "--pid", std::to_string(target > 0 ? target : ::getpid())};
  if (!libcuda.empty()) argv.insert(argv.end(), {"--libcuda", libcuda});
  pid_t pid = -1;
  Status s = spawn(argv, fds[1], &pid);
  ::close(fds[1]);
  if (!s.ok()) {
    ::close(fds[0]);
    return s;
  }
  std::unique_ptr<CudaCheckpointHelper> h(new CudaCheckpointHelper(fds[0], pid));
  std::string line;
  s = h->read_line(&line);
  if (!s.ok()) return s;
  if (line != "ready") return Status::io(helper + ": " + (line.rfind("error ", 0) == 0 ? line.substr(6) : line));
  *out = std::move(h);
  return Status::OK();
}

CudaCheckpointHelper::~CudaCheckpointHelper() {
  ::close(fd_);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

Status CudaCheckpointHelper::lock(std::chrono::milliseconds timeout) {
  return ask("lock " + std::to_string(timeout.count()));
}
Status CudaCheckpointHelper::checkpoint() { return ask("checkpoint"); }
Status CudaCheckpointHelper::restore() { return ask("restore"); }
Status CudaCheckpointHelper::unlock() { return ask("unlock"); }
Status CudaCheckpointHelper::state(std::string* out) { return ask("state", out); }

Status CudaCheckpointHelper::ask(const std::string& command, std::string* rest) {
  const std::string line = command + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "hydro-cuda-checkpoint (pid " + std::to_string(pid_) + ") is gone");
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  HYDRO_RETURN_IF_ERROR(read_line(&answer));
  if (answer == "ok" || answer.rfind("ok ", 0) == 0) {
    if (rest) *rest = answer.size() > 3 ? answer.substr(3) : "";
    return Status::OK();
  }
  return Status::io(answer.rfind("error ", 0) == 0 ? answer.substr(6) : "hydro-cuda-checkpoint said: " + answer);
}

Status CudaCheckpointHelper::read_line(std::string* line) {
  for (;;) {
    const size_t end = buffered_.find('\n');
    if (end != std::string::npos) {
      *line = buffered_.substr(0, end);
      buffered_.erase(0, end + 1);
      return Status::OK();
    }
    char buf[512];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "reading hydro-cuda-checkpoint (pid " + std::to_string(pid_) + ")");
    if (n == 0) return Status::io("hydro-cuda-checkpoint (pid " + std::to_string(pid_) + ") ended without an answer");
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

std::string find_cuda_checkpoint_helper() {
  constexpr const char* kName = "hydro-cuda-checkpoint";
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_cuda_checkpoint_helper), &info) && info.dli_fname) {
    std::string dir = info.dli_fname;
    dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
    if (::access((dir + "/" + kName).c_str(), X_OK) == 0) return dir + "/" + kName;
  }
  const std::string installed = std::string(HYDRO_LIBEXEC_DIR) + "/" + kName;
  return ::access(installed.c_str(), X_OK) == 0 ? installed : "";
}

}  // namespace hydro
