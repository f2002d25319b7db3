// Test support: a power loss. CrashFs wraps the real filesystem and, like leveldb's fault-injection
// Env, remembers what a disk would not yet hold: file data past a file's last fsync, and directory
// entries (new files, directories and symlinks, renames, removals) made since their directory's
// last fsync. The writer runs on real files until the crash point (the Nth change); from then on
// every call fails, as the machine is gone. power_loss() then rolls the real files back to what
// the disk held, so a reader can look at what a reboot would find.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "hydro/durable_fs.h"

namespace hydro::test {

class CrashFs : public Fs {
 public:
  // `scratch`: an empty directory on the same filesystem, for what removals and replacing renames
  // take away (so that a rollback can bring it back). `crash_at`: the 0-based change at which the
  // power goes (a change: create, append, fsync, mkdir, rename, symlink, remove); -1 = never.
  CrashFs(std::string scratch, int crash_at);

  int changes() const { return changes_; }
  bool crashed() const { return crashed_; }
  // Drops what was not durable: truncates files to their last fsync, then undoes the directory
  // changes not yet made durable, newest first.
  void power_loss();

  Status new_writable(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status read_file(const std::string& p, std::string* o) override;
  Status read_stream(const std::string& p, const std::function<void(const char*, size_t)>& s) override;
  Status make_dir(const std::string& p, unsigned mode) override;
  Status make_dirs(const std::string& p, unsigned mode) override;
  Status sync_dir(const std::string& p) override;
  Status rename_noreplace(const std::string& a, const std::string& b) override;
  Status rename(const std::string& a, const std::string& b) override;
  Status symlink(const std::string& target, const std::string& link) override;
  Status read_link(const std::string& p, std::string* t) override;
  Status list_dir(const std::string& p, std::vector<std::string>* n) override;
  Status remove_tree(const std::string& p) override;
  bool exists(const std::string& p) override;

  // For the files it hands out.
  Status change(const std::string& what);
  void wrote(const std::string& path, size_t n) { written_[path] += n; }
  void synced(const std::string& path) { synced_[path] = written_[path]; }

 private:
  // One directory change not yet durable: it is once each of `dirs` has been fsynced after it.
  struct Pending {
    enum Kind { created, renamed, removed } kind;
    std::string path, from,
        saved;  // created: path; renamed: from -> path (saved: what it replaced); removed: path -> saved
    std::set<std::string> dirs;
  };
  std::string stash(const std::string& path);  // moves `path` into scratch; returns where
  // What lay under `from` is now under `to`: file sizes and the pending changes follow.
  void moved(const std::string& from, const std::string& to);
  // The same for the paths of the first `before` pending changes only.
  void relocate(size_t before, const std::string& from, const std::string& to);

  std::string scratch_;
  int crash_at_;
  int changes_ = 0;
  int stashed_ = 0;
  bool crashed_ = false;
  std::vector<Pending> pending_;
  std::map<std::string, uint64_t> written_, synced_;  // bytes per file, by its current path
};

}  // namespace hydro::test
