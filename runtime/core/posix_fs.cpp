// The real filesystem. Every call is checked; errors name the path.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "hydro/durable_fs.h"
#include "write_behind.h"

namespace hydro {
namespace {

Status errno_status(const std::string& what) { return Status::from_errno(errno, what); }

class PosixFile final : public WritableFile {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(path), behind_(new WriteBehind(fd, std::move(path))) {}
  ~PosixFile() override {
    behind_.reset();  // its thread writes to fd_
    if (fd_ >= 0) ::close(fd_);
  }
  Status append(const void* data, size_t n) override {
    if (!behind_) return Status::invalid_argument("write " + path_ + ": the file is closed");
    return behind_->append(data, n);
  }

  Status sync() override {
    if (!behind_) return Status::invalid_argument("fsync " + path_ + ": the file is closed");
    if (!sync_error_.ok()) return sync_error_;
    HYDRO_RETURN_IF_ERROR(behind_->drain());
    // A failed fsync may have dropped the dirty pages: it is never retried into success.
    if (::fsync(fd_) != 0) sync_error_ = errno_status("fsync " + path_);
    return sync_error_;
  }
  Status start_sync() override {
    if (!behind_) return Status::invalid_argument("write " + path_ + ": the file is closed");
    return behind_->drain_and_start_writeback();
  }
  Status close() override {
    if (!behind_) return Status::invalid_argument("close " + path_ + ": already closed");
    Status drained = behind_->drain();
    behind_.reset();
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && errno != EINTR) return errno_status("close " + path_);
    return drained;
  }

 private:
  int fd_;
  std::string path_;
  std::unique_ptr<WriteBehind> behind_;
  Status sync_error_;
};

class PosixFs final : public Fs {
 public:
  Status new_writable(const std::string& path, std::unique_ptr<WritableFile>* out) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return errno_status("create " + path);
    out->reset(new PosixFile(fd, path));
    return Status::OK();
  }

  Status read_file(const std::string& path, std::string* out) override {
    out->clear();
    return read_stream(path, [out](const char* d, size_t n) { out->append(d, n); });
  }

  // Checkpoint files only: a symlink, a FIFO or a device planted in a checkpoint (by anyone who
  // could write there) is refused, never followed, waited on or read without end.
  Status read_stream(const std::string& path, const std::function<void(const char*, size_t)>& sink) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && errno == ELOOP) return Status::io(path + " is a symlink; hydro does not follow it");
    if (fd < 0) return errno_status("open " + path);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::io(path + " is not a regular file");
    }
    std::vector<char> buf(1 << 20);
    for (;;) {
      ssize_t r = ::read(fd, buf.data(), buf.size());
      if (r < 0) {
        if (errno == EINTR) continue;
        Status s = errno_status("read " + path);
        ::close(fd);
        return s;
      }
      if (r == 0) break;
      sink(buf.data(), static_cast<size_t>(r));
    }
    ::close(fd);
    return Status::OK();
  }

  Status make_dir(const std::string& path, unsigned mode) override {
    if (::mkdir(path.c_str(), mode) != 0) return errno_status("mkdir " + path);
    return Status::OK();
  }

  Status make_dirs(const std::string& path, unsigned mode) override {
    if (path.empty()) return Status::invalid_argument("empty directory path");
    for (size_t pos = 1; pos <= path.size(); ++pos) {
      if (pos != path.size() && path[pos] != '/') continue;
      std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return errno_status("mkdir " + prefix);
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno_status("stat " + path);
    if (!S_ISDIR(st.st_mode)) return Status::invalid_argument(path + " exists and is not a directory");
    return Status::OK();
  }

  Status sync_dir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_status("open directory " + path);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return Status::from_errno(err, "fsync directory " + path);
    return Status::OK();
  }

  Status rename_noreplace(const std::string& from, const std::string& to) override {
    if (::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), 1 /*RENAME_NOREPLACE*/) != 0)
      return errno_status("rename " + from + " to " + to);
    return Status::OK();
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_status("rename " + from + " to " + to);
    return Status::OK();
  }

  Status symlink(const std::string& target, const std::string& link) override {
    if (::symlink(target.c_str(), link.c_str()) != 0) return errno_status("symlink " + link);
    return Status::OK();
  }

  Status read_link(const std::string& path, std::string* target) override {
    char buf[4096];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
    if (n < 0) return errno_status("readlink " + path);
    target->assign(buf, static_cast<size_t>(n));
    return Status::OK();
  }

  Status list_dir(const std::string& path, std::vector<std::string>* names) override {
    DIR* d = ::opendir(path.c_str());
    if (!d) return errno_status("open directory " + path);
    names->clear();
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names->push_back(n);
    }
    ::closedir(d);
    return Status::OK();
  }

  // Several processes may remove one tree at once (the tasks of a node cleaning the same stale
  // staging directory after a crash): whatever another one removed first counts as removed.
  Status remove_tree(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::OK();
      return errno_status("lstat " + path);
    }
    if (S_ISDIR(st.st_mode)) {
      std::vector<std::string> names;
      Status listed = list_dir(path, &names);
      if (!listed.ok()) return exists(path) ? listed : Status::OK();
      for (const auto& n : names) HYDRO_RETURN_IF_ERROR(remove_tree(path + "/" + n));
      if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return errno_status("rmdir " + path);
    } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return errno_status("unlink " + path);
    }
    return Status::OK();
  }

  bool exists(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  }
};

}  // namespace

Fs& posix_fs() {
  static PosixFs fs;
  return fs;
}

}  // namespace hydro
