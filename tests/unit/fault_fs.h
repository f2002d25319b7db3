// Test support: a filesystem that wraps the real one and fails on command (the Nth write,
// ENOSPC, fsync), a temporary directory, a small committed checkpoint, and a poll for conditions
// other threads make true.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "hydro/checkpoint_dir.h"
#include "hydro/durable_fs.h"

namespace hydro::test {

class FaultFs : public Fs {
 public:
  explicit FaultFs(Fs& real = posix_fs()) : real_(real) {}
  int fail_write_at = -1;     // the Nth append (0-based) fails with ENOSPC
  int fail_sync_at = -1;      // the Nth file fsync fails with EIO
  int fail_dir_sync_at = -1;  // the Nth directory fsync fails with EIO
  int writes = 0, syncs = 0, dir_syncs = 0;
  std::string fail_read_of;           // reading this file fails with EIO (a disk or NFS hiccup)
  std::string fail_list_of;           // listing this directory fails with EIO
  std::string fail_remove_of;         // removing this tree fails with EIO
  int fail_rename_noreplace_at = -1;  // the Nth no-replace rename (0-based) fails with EIO
  int renames_noreplace = 0;
  std::function<void(const std::string&)> on_new_writable;  // called first, with the path
  std::function<void(const std::string&)> on_remove_tree;   // called first, with the path

  Status new_writable(const std::string& path, std::unique_ptr<WritableFile>* out) override;
  Status read_file(const std::string& p, std::string* o) override {
    if (p == fail_read_of) return Status::from_errno(EIO, "read " + p);
    return real_.read_file(p, o);
  }
  Status read_stream(const std::string& p, const std::function<void(const char*, size_t)>& s) override {
    return real_.read_stream(p, s);
  }
  Status make_dir(const std::string& p, unsigned m) override { return real_.make_dir(p, m); }
  Status make_dirs(const std::string& p, unsigned m) override { return real_.make_dirs(p, m); }
  Status sync_dir(const std::string& p) override {
    if (dir_syncs++ == fail_dir_sync_at) return Status::from_errno(EIO, "fsync directory " + p);
    return real_.sync_dir(p);
  }
  Status rename_noreplace(const std::string& a, const std::string& b) override {
    if (renames_noreplace++ == fail_rename_noreplace_at) return Status::from_errno(EIO, "rename " + a + " to " + b);
    return real_.rename_noreplace(a, b);
  }
  Status rename(const std::string& a, const std::string& b) override { return real_.rename(a, b); }
  Status symlink(const std::string& t, const std::string& l) override { return real_.symlink(t, l); }
  Status read_link(const std::string& p, std::string* t) override { return real_.read_link(p, t); }
  Status list_dir(const std::string& p, std::vector<std::string>* n) override {
    if (p == fail_list_of) return Status::from_errno(EIO, "list " + p);
    return real_.list_dir(p, n);
  }
  Status remove_tree(const std::string& p) override {
    if (on_remove_tree) on_remove_tree(p);
    if (p == fail_remove_of) return Status::from_errno(EIO, "remove " + p);
    return real_.remove_tree(p);
  }
  bool exists(const std::string& p) override { return real_.exists(p); }

 private:
  Fs& real_;
};

// A fresh directory under /tmp, removed at destruction.
struct TempDir {
  TempDir();
  // In memory (/dev/shm, where it is a directory; else as above): for a test whose outcome a slow
  // fsync would change (a save timed against a budget), not one of durability.
  struct InMemory {};
  explicit TempDir(InMemory);
  ~TempDir();
  std::string path;
};

// Commits checkpoint `step` in `dir`: model.pt (`payload` and the step) and a 1000-byte optimizer.pt.
Status write_checkpoint(CheckpointDir& dir, int64_t step, const std::string& payload = "weights");

// Polls a condition that another thread or process makes true. The cap (20 s) only keeps a
// broken test from hanging; nothing asserts on how long it took.
template <typename F>
bool eventually(F f) {
  for (int i = 0; i < 20000; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace hydro::test
