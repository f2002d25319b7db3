// The filesystem behind a small interface, so tests can inject faults (leveldb's Env).
// Every call is checked and reported as a Status naming the path.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hydro/status.h"

namespace hydro {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status append(const void* data, size_t n) = 0;
  virtual Status sync() = 0;  // fsync; never retried into success
  // Writes out what is buffered and starts its writeback without waiting for it. sync() still
  // makes the file durable; meanwhile a writer can fill the next file while this one goes to disk.
  virtual Status start_sync() { return Status::OK(); }
  virtual Status close() = 0;
};

class Fs {
 public:
  virtual ~Fs() = default;
  // Creates a new file (O_EXCL): never writes through an existing name or symlink.
  virtual Status new_writable(const std::string& path, std::unique_ptr<WritableFile>* out) = 0;
  virtual Status read_file(const std::string& path, std::string* out) = 0;
  // Reads a file in chunks, handing each to `sink` (no copy of the whole file).
  virtual Status read_stream(const std::string& path, const std::function<void(const char*, size_t)>& sink) = 0;
  virtual Status make_dir(const std::string& path, unsigned mode) = 0;   // EEXIST is an error
  virtual Status make_dirs(const std::string& path, unsigned mode) = 0;  // mkdir -p
  virtual Status sync_dir(const std::string& path) = 0;
  virtual Status rename_noreplace(const std::string& from, const std::string& to) = 0;
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  virtual Status symlink(const std::string& target, const std::string& link) = 0;
  virtual Status read_link(const std::string& path, std::string* target) = 0;
  virtual Status list_dir(const std::string& path, std::vector<std::string>* names) = 0;
  virtual Status remove_tree(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
};

// The real filesystem (POSIX, with Linux's renameat2).
Fs& posix_fs();
// Whether posix_fs() writes what lies past the first 128 MiB of a file with O_DIRECT where the
// filesystem takes it (HYDRO_CKPT_DIRECT_IO=on|off; default on). Process-wide.
void set_direct_io(bool on);

}  // namespace hydro
