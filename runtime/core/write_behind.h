// Writes a file on a thread of its own, behind the caller. append() copies into one of a few
// buffers, reused from file to file, and returns. The thread writes full buffers in order, so
// serializing and hashing (the caller) overlap the disk.
//
// The first kDirectAfter bytes go through the page cache, and their writeback is started as the
// file grows, so that the final fsync has little left to do. The rest of a bigger file is written
// with O_DIRECT where the filesystem takes it (set_direct_io(false) turns that off): full
// buffers are aligned and go from them to the device, with no copy into the page cache, whose
// fresh pages are slow to fault in on a VM. The last, partial buffer goes through the page
// cache, and fsync covers both. Where O_DIRECT is refused (tmpfs, some network filesystems),
// everything goes through the page cache.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "hydro/status.h"

namespace hydro {

class WriteBehind {
 public:
  static constexpr size_t kBufferBytes = 8 << 20;
  static constexpr size_t kDepth = 4;  // full buffers queued before append() waits
  // Below this, page-cache writes are faster: their pages are recycled warm, and the final fsync
  // writes them back at a deep queue. Above it, O_DIRECT: the page cache would need fresh pages.
  static constexpr uint64_t kDirectAfter = 128 << 20;
  struct Free {
    void operator()(char* p) const;
  };
  using Memory = std::unique_ptr<char, Free>;  // kBufferBytes, aligned for O_DIRECT
  static size_t alignment();                   // 4096, or the page size where that is larger

  WriteBehind(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~WriteBehind();
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  // The first write error, once known, is returned here and by every later call.
  Status append(const void* data, size_t n);
  // Returns once all appended bytes are written (not synced), with the first write error.
  Status drain();
  // drain(), then starts writeback of every byte not yet under way, without waiting for it.
  Status drain_and_start_writeback();

 private:
  struct Buffer {
    Memory data;
    size_t size = 0;
    Buffer() = default;
    Buffer(Buffer&& o) noexcept : data(std::move(o.data)), size(o.size) { o.size = 0; }
    Buffer& operator=(Buffer&& o) noexcept {
      data = std::move(o.data);
      size = o.size;
      o.size = 0;
      return *this;
    }
  };
  bool hand_over(Buffer& b);     // false: an error is known, and the buffer went back to the pool
  Status fail(const Status& s);  // records the first error; returns the recorded one
  void run();
  Status write_out(const Buffer& b);  // on the writer thread, or on the caller's before it starts
  void start_writeback();             // of [kicked_, written_), by whoever owns them (above)
  void try_direct();
  Status end_direct();

  const int fd_;
  const std::string path_;
  Buffer current_;
  uint64_t written_ = 0, kicked_ = 0;           // the writer's (or, before it starts, the caller's)
  bool direct_ = false, tried_direct_ = false;  // the writer's

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Buffer> queue_;
  bool busy_ = false, stop_ = false;
  Status error_;
  std::thread writer_;
};

}  // namespace hydro
