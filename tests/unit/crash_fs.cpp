#include "crash_fs.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

namespace hydro::test {
namespace {

std::string parent_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

class CrashFile : public WritableFile {
 public:
  CrashFile(CrashFs& fs, std::unique_ptr<WritableFile> real, std::string path)
      : fs_(fs), real_(std::move(real)), path_(std::move(path)) {}
  Status append(const void* d, size_t n) override {
    HYDRO_RETURN_IF_ERROR(fs_.change("write " + path_));
    HYDRO_RETURN_IF_ERROR(real_->append(d, n));
    fs_.wrote(path_, n);
    return Status::OK();
  }
  Status sync() override {
    HYDRO_RETURN_IF_ERROR(fs_.change("fsync " + path_));
    HYDRO_RETURN_IF_ERROR(real_->sync());
    fs_.synced(path_);
    return Status::OK();
  }
  Status start_sync() override { return real_->start_sync(); }  // no durability: no change
  Status close() override { return real_->close(); }

 private:
  CrashFs& fs_;
  std::unique_ptr<WritableFile> real_;
  std::string path_;
};

}  // namespace

CrashFs::CrashFs(std::string scratch, int crash_at) : scratch_(std::move(scratch)), crash_at_(crash_at) {}

Status CrashFs::change(const std::string& what) {
  if (!crashed_ && changes_++ == crash_at_) crashed_ = true;
  return crashed_ ? Status::from_errno(EIO, what + " (power lost)") : Status::OK();
}

std::string CrashFs::stash(const std::string& path) {
  std::string to = scratch_ + "/" + std::to_string(stashed_++);
  std::filesystem::rename(path, to);
  moved(path, to);
  return to;
}

void CrashFs::moved(const std::string& from, const std::string& to) {
  for (auto* sizes : {&written_, &synced_}) {
    std::map<std::string, uint64_t> next;
    for (const auto& [path, n] : *sizes) next[under(path, from) ? to + path.substr(from.size()) : path] = n;
    *sizes = std::move(next);
  }
  relocate(pending_.size(), from, to);
}

void CrashFs::relocate(size_t before, const std::string& from, const std::string& to) {
  auto fix = [&](std::string& path) {
    if (under(path, from)) path = to + path.substr(from.size());
  };
  for (size_t i = 0; i < before; ++i) {
    fix(pending_[i].path);
    fix(pending_[i].from);
  }
}

Status CrashFs::new_writable(const std::string& path, std::unique_ptr<WritableFile>* out) {
  HYDRO_RETURN_IF_ERROR(change("create " + path));
  std::unique_ptr<WritableFile> real;
  HYDRO_RETURN_IF_ERROR(posix_fs().new_writable(path, &real));
  pending_.push_back({Pending::created, path, "", "", {parent_of(path)}});
  written_[path] = synced_[path] = 0;
  out->reset(new CrashFile(*this, std::move(real), path));
  return Status::OK();
}

Status CrashFs::make_dir(const std::string& p, unsigned mode) {
  HYDRO_RETURN_IF_ERROR(change("mkdir " + p));
  HYDRO_RETURN_IF_ERROR(posix_fs().make_dir(p, mode));
  pending_.push_back({Pending::created, p, "", "", {parent_of(p)}});
  return Status::OK();
}

Status CrashFs::make_dirs(const std::string& p, unsigned mode) {
  std::vector<std::string> missing;
  for (std::string d = p; d != "/" && !posix_fs().exists(d); d = parent_of(d)) missing.push_back(d);
  std::reverse(missing.begin(), missing.end());
  for (const auto& d : missing) HYDRO_RETURN_IF_ERROR(make_dir(d, mode));
  return posix_fs().make_dirs(p, mode);
}

Status CrashFs::sync_dir(const std::string& p) {
  HYDRO_RETURN_IF_ERROR(change("fsync directory " + p));
  HYDRO_RETURN_IF_ERROR(posix_fs().sync_dir(p));
  for (auto& e : pending_) e.dirs.erase(p);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Pending& e) { return e.dirs.empty(); }),
                 pending_.end());
  return Status::OK();
}

Status CrashFs::rename_noreplace(const std::string& a, const std::string& b) {
  HYDRO_RETURN_IF_ERROR(change("rename " + a));
  HYDRO_RETURN_IF_ERROR(posix_fs().rename_noreplace(a, b));
  moved(a, b);
  pending_.push_back({Pending::renamed, b, a, "", {parent_of(a), parent_of(b)}});
  return Status::OK();
}

Status CrashFs::rename(const std::string& a, const std::string& b) {
  HYDRO_RETURN_IF_ERROR(change("rename " + a));
  if (!posix_fs().exists(a)) return posix_fs().rename(a, b);  // the real error
  std::string saved = posix_fs().exists(b) ? stash(b) : "";
  HYDRO_RETURN_IF_ERROR(posix_fs().rename(a, b));
  moved(a, b);
  pending_.push_back({Pending::renamed, b, a, saved, {parent_of(a), parent_of(b)}});
  return Status::OK();
}

Status CrashFs::symlink(const std::string& target, const std::string& link) {
  HYDRO_RETURN_IF_ERROR(change("symlink " + link));
  HYDRO_RETURN_IF_ERROR(posix_fs().symlink(target, link));
  pending_.push_back({Pending::created, link, "", "", {parent_of(link)}});
  return Status::OK();
}

Status CrashFs::remove_tree(const std::string& p) {
  HYDRO_RETURN_IF_ERROR(change("remove " + p));
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(p, ec))) return Status::OK();
  pending_.push_back({Pending::removed, p, "", stash(p), {parent_of(p)}});
  return Status::OK();
}

void CrashFs::power_loss() {
  for (const auto& [path, n] : written_) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec)))
      std::filesystem::resize_file(path, synced_[path], ec);
  }
  // Newest first; each undone move puts the paths of the changes before it back where they were.
  for (size_t i = pending_.size(); i-- > 0;) {
    const Pending e = pending_[i];
    std::error_code ec;
    auto move_back = [&](const std::string& from, const std::string& to) {
      std::filesystem::rename(from, to, ec);
      relocate(i, from, to);
    };
    switch (e.kind) {
      case Pending::created: std::filesystem::remove_all(e.path, ec); break;
      case Pending::renamed:
        move_back(e.path, e.from);
        if (!e.saved.empty()) move_back(e.saved, e.path);
        break;
      case Pending::removed: move_back(e.saved, e.path); break;
    }
  }
  pending_.clear();
}

// Reads change nothing; after the crash they fail too: the writer's machine is gone.
Status CrashFs::read_file(const std::string& p, std::string* o) {
  return crashed_ ? Status::from_errno(EIO, "read " + p + " (power lost)") : posix_fs().read_file(p, o);
}
Status CrashFs::read_stream(const std::string& p, const std::function<void(const char*, size_t)>& s) {
  return crashed_ ? Status::from_errno(EIO, "read " + p + " (power lost)") : posix_fs().read_stream(p, s);
}
Status CrashFs::read_link(const std::string& p, std::string* t) {
  return crashed_ ? Status::from_errno(EIO, "readlink " + p + " (power lost)") : posix_fs().read_link(p, t);
}
Status CrashFs::list_dir(const std::string& p, std::vector<std::string>* n) {
  return crashed_ ? Status::from_errno(EIO, "list " + p + " (power lost)") : posix_fs().list_dir(p, n);
}
bool CrashFs::exists(const std::string& p) { return !crashed_ && posix_fs().exists(p); }

}  // namespace hydro::test
