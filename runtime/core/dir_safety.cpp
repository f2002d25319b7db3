#include "dir_safety.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <ctime>

namespace hydro {
namespace {

constexpr time_t kForeignStagingMaxAge = 24 * 3600;

std::atomic<uint64_t> g_seq{0};

// This machine's name as it goes into staging names: letters, digits, '-', '_' and '.' only.
const std::string& host_tag() {
  static const std::string tag = [] {
    char buf[256] = {0};
    if (::gethostname(buf, sizeof buf - 1) != 0) return std::string("unknown");
    std::string t;
    for (const char* p = buf; *p; ++p) {
      const char c = *p;
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_' || c == '.';
      t += ok ? c : '_';
    }
    return t.empty() ? std::string("unknown") : t;
  }();
  return tag;
}

std::string mode_text(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// The parent of an absolute path ("/a/b" -> "/a", "/a" -> "/").
std::string parent_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

}  // namespace

Status check_root_trusted(const std::string& root) {
  const std::string what = "checkpoint directory " + root;
  struct stat st;
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno(errno, what);
  const int rc = ::fstat(fd, &st);
  ::close(fd);
  if (rc != 0) return Status::from_errno(errno, what);
  if (st.st_uid != ::geteuid())
    return Status::invalid_argument(what + " is owned by uid " + std::to_string(st.st_uid) + ", not by uid " +
                                    std::to_string(::geteuid()) +
                                    " who runs the job: its owner could plant a "
                                    "checkpoint that the job loads; refusing it (give a directory of your own)");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return Status::invalid_argument(what + " has mode " + mode_text(st.st_mode) +
                                    ": other users could plant a checkpoint that the job loads; refusing it "
                                    "(chmod go-w " +
                                    root + ")");
  for (std::string dir = parent_of(root);; dir = parent_of(dir)) {
    if (::stat(dir.c_str(), &st) != 0) return Status::from_errno(errno, what + ": " + dir);
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
      return Status::invalid_argument(what + ": " + dir +
                                      " above it is writable by everyone without the sticky "
                                      "bit (mode " +
                                      mode_text(st.st_mode) +
                                      "), so anyone could replace the "
                                      "directory; refusing it");
    if (dir == "/") break;
  }
  return Status::OK();
}

std::string private_suffix() {
  char buf[64];
  std::snprintf(buf, sizeof buf, ".%d.%" PRIu64 "@", static_cast<int>(::getpid()), g_seq.fetch_add(1));
  return buf + host_tag();
}

bool writer_alive(const std::string& root, const std::string& name) {
  std::string local = name;
  const size_t at = name.rfind('@');
  if (at != std::string::npos) {
    if (name.compare(at + 1, std::string::npos, host_tag()) != 0) {
      struct stat st;
      if (::lstat((root + "/" + name).c_str(), &st) != 0) return errno != ENOENT;
      return std::time(nullptr) - st.st_mtime < kForeignStagingMaxAge;
    }
    local = name.substr(0, at);
  }
  // ".<pid>.<seq>" at the end (names before the host was added have no "@host").
  size_t last = local.rfind('.');
  if (last == std::string::npos || last == 0) return true;
  size_t prev = local.rfind('.', last - 1);
  if (prev == std::string::npos) return true;
  long pid = std::strtol(local.c_str() + prev + 1, nullptr, 10);
  if (pid <= 0) return true;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace hydro
