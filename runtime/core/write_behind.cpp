#include "write_behind.h"

#include "hydro/durable_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace hydro {
namespace {

std::atomic<bool> g_direct{true};

// Buffers outlive their files: memory touched once stays fast (fresh pages are slow to fault in
// on a VM whose host reclaims idle memory).
class BufferPool {
 public:
  static BufferPool& instance() {
    static BufferPool* pool = new BufferPool;  // never destroyed: writers may outlive statics
    return *pool;
  }
  WriteBehind::Memory take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto b = std::move(idle_.back());
        idle_.pop_back();
        return b;
      }
    }
    char* p = static_cast<char*>(std::aligned_alloc(WriteBehind::alignment(), WriteBehind::kBufferBytes));
    if (!p) throw std::bad_alloc();
    return WriteBehind::Memory(p);
  }
  void give(WriteBehind::Memory b) {
    if (!b) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < WriteBehind::kDepth + 2) idle_.push_back(std::move(b));
  }

 private:
  std::mutex mu_;
  std::vector<WriteBehind::Memory> idle_;
};

}  // namespace

void set_direct_io(bool on) { g_direct = on; }

void WriteBehind::Free::operator()(char* p) const { std::free(p); }

size_t WriteBehind::alignment() {
  static const size_t a = std::max<size_t>(4096, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
  return a;
}

Status WriteBehind::fail(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) error_ = s;
  cv_.notify_all();
  return error_;
}

WriteBehind::~WriteBehind() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();  // it empties the queue before it returns
  BufferPool::instance().give(std::move(current_.data));
}

Status WriteBehind::append(const void* data, size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
  }
  const char* p = static_cast<const char*>(data);
  try {
    while (n > 0) {
      if (!current_.data) current_.data = BufferPool::instance().take();
      size_t take = std::min(n, kBufferBytes - current_.size);
      std::memcpy(current_.data.get() + current_.size, p, take);
      current_.size += take;
      p += take;
      n -= take;
      if (current_.size == kBufferBytes && !hand_over(current_)) break;  // failed: stop copying
    }
  } catch (const std::exception& e) {  // no memory for a buffer, or no thread to write it
    return fail(Status::io("write " + path_ + ": " + e.what()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

bool WriteBehind::hand_over(Buffer& b) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!writer_.joinable()) writer_ = std::thread([this] { run(); });  // may throw: b stays the caller's
  cv_.wait(lock, [&] { return queue_.size() < kDepth || !error_.ok(); });
  if (!error_.ok()) {
    BufferPool::instance().give(std::move(b.data));
    b = Buffer{};
    return false;
  }
  queue_.push_back(std::move(b));
  cv_.notify_all();
  return true;
}

Status WriteBehind::drain() {
  {
    // Every full buffer is written: the tail goes through the page cache.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    if (direct_ && error_.ok()) error_ = end_direct();
  }
  if (current_.size > 0) {
    if (writer_.joinable()) {  // writer_ is started and read on the caller's thread only
      (void)hand_over(current_);
    } else {  // a small file: written here, no thread
      Status s = write_out(current_);
      if (!s.ok()) (void)fail(s);
      BufferPool::instance().give(std::move(current_.data));
      current_ = Buffer{};
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  return error_;
}

Status WriteBehind::drain_and_start_writeback() {
  HYDRO_RETURN_IF_ERROR(drain());
  // The writer thread is idle once drained: kicked_ and written_ are the caller's until the next
  // append.
  if (written_ > kicked_) start_writeback();
  return Status::OK();
}

// Starts writeback of what is written since the last start, without waiting for it. A failed
// hint is not an error: fsync reports what matters.
void WriteBehind::start_writeback() {
  ::sync_file_range(fd_, static_cast<off_t>(kicked_), static_cast<off_t>(written_ - kicked_), SYNC_FILE_RANGE_WRITE);
  kicked_ = written_;
}

void WriteBehind::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left
    Buffer b = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool skip = !error_.ok() || stop_;  // failed, or the file is being abandoned
    lock.unlock();
    cv_.notify_all();  // room in the queue
    Status s = skip ? Status::OK() : write_out(b);
    BufferPool::instance().give(std::move(b.data));
    lock.lock();
    if (error_.ok()) error_ = s;
    busy_ = false;
    cv_.notify_all();
  }
}

// Full buffers start at multiples of kBufferBytes and are aligned: O_DIRECT can take them.
void WriteBehind::try_direct() {
  tried_direct_ = true;
  if (!g_direct) return;
  int flags = ::fcntl(fd_, F_GETFL);
  direct_ = flags >= 0 && ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0;
}

Status WriteBehind::end_direct() {
  direct_ = false;
  int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) return Status::from_errno(errno, "fcntl " + path_);
  return Status::OK();
}

Status WriteBehind::write_out(const Buffer& b) {
  // Only full buffers at their own offsets: a tail, or anything after a drain, stays buffered.
  if (!tried_direct_ && written_ >= kDirectAfter && b.size == kBufferBytes && written_ % kBufferBytes == 0)
    try_direct();
  const char* p = b.data.get();
  size_t n = b.size;
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINVAL && direct_) {  // refused after all: through the page cache
      HYDRO_RETURN_IF_ERROR(end_direct());
      continue;
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::from_errno(errno, "write " + path_);
    }
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
  // Start writeback of what is written so far, without waiting for it, so that the final fsync
  // has little left to do. It may block while the device queue is full: that is this thread.
  if (!direct_ && written_ - kicked_ >= kBufferBytes) start_writeback();
  return Status::OK();
}

}  // namespace hydro
