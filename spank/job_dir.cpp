#include "job_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "admin_config.h"

namespace hydro::spank {
namespace {
using admin::expand_template;

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Opens `prefix` (following symlinks: it is the admin's, or the user's own submit directory), then
// makes and enters each of `names` below it without following any symlink.
Status make_private_dirs(const std::string& prefix, const std::vector<std::string>& names, const std::string& what,
                         const std::string& prefix_label, const std::string& prefix_fix, std::string* out) {
  Fd dir(::open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.fd < 0)
    return Status::from_errno(errno, what + ": " + prefix_label + " " + prefix + " is not usable (" + prefix_fix + ")");
  struct stat st;
  if (::fstat(dir.fd, &st) != 0) return Status::from_errno(errno, prefix);
  if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
    return Status::invalid_argument(
        what + ": " + prefix + " is writable by everyone without the sticky bit; refusing (chmod +t " + prefix + ")");
  std::string path = prefix == "/" ? "" : prefix;
  for (const auto& name : names) {
    const std::string parent = path.empty() ? "/" : path;
    path += "/" + name;
    bool made = ::mkdirat(dir.fd, name.c_str(), 0700) == 0;
    if (!made && errno != EEXIST) return Status::from_errno(errno, "cannot create " + path);
    // Durably in its parent: a power loss must not take the job's directory, checkpoints and all.
    if (made && ::fsync(dir.fd) != 0) return Status::from_errno(errno, "fsync " + parent);
    Fd next(::openat(dir.fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (next.fd < 0) {
      int err = errno;
      struct stat lst;
      if (::fstatat(dir.fd, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
        return Status::invalid_argument(path + " is a symlink; hydro does not follow it (remove it)");
      if (err == ENOTDIR) return Status::invalid_argument(path + " exists and is not a directory");
      return Status::from_errno(err, "cannot open " + path);
    }
    if (::fstat(next.fd, &st) != 0) return Status::from_errno(errno, path);
    if (st.st_uid != ::geteuid())
      return Status::invalid_argument(path + " is owned by uid " + std::to_string(st.st_uid) + ", not by uid " +
                                      std::to_string(::geteuid()) + " who runs the job; refusing it");
    if (made && ::fchmod(next.fd, 0700) != 0) return Status::from_errno(errno, "chmod 0700 " + path);
    std::swap(dir.fd, next.fd);
  }
  *out = path;
  return Status::OK();
}

}  // namespace

Status make_job_dir(const std::string& tmpl, const std::string& user, uid_t uid, unsigned job_id, std::string* out) {
  const std::string what = "checkpoint directory from the template '" + tmpl + "'";
  std::vector<std::string> parts = split(tmpl);
  size_t first = 0;
  while (first < parts.size() && parts[first].find('%') == std::string::npos) ++first;
  if (first == parts.size()) return Status::invalid_argument(what + ": it has no %-escape (use %j)");

  std::string prefix;
  for (size_t i = 0; i < first; ++i) prefix += "/" + parts[i];
  if (prefix.empty()) prefix = "/";
  std::vector<std::string> names;
  for (size_t i = first; i < parts.size(); ++i) {
    std::string name;
    HYDRO_RETURN_IF_ERROR(expand_template(parts[i], user, uid, job_id, &name));
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      return Status::invalid_argument(what + ": component '" + parts[i] + "' expands to '" + name +
                                      "', not a directory name");
    names.push_back(name);
  }
  return make_private_dirs(prefix, names, what, "the admin's directory", "create it, mode 1777", out);
}

Status make_default_job_dir(const std::string& submit_dir, unsigned job_id, std::string* out) {
  if (submit_dir.empty() || submit_dir[0] != '/')
    return Status::invalid_argument("hydro's default checkpoint directory: the submit directory '" + submit_dir +
                                    "' is not an absolute path");
  return make_private_dirs(submit_dir, {kDefaultDirName, std::to_string(job_id)},
                           "hydro's default checkpoint directory", "the job's submit directory",
                           "give --hydro-checkpoint-dir", out);
}

}  // namespace hydro::spank
