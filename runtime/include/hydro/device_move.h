// Issue 57: hydro's own move of a process's device memory, the first choice of gpu_release=full.
// An allocator that maps each segment of device memory itself (its virtual addresses reserved, its
// physical memory created and mapped there: CUDA's cuMemAddressReserve, cuMemCreate, cuMemMap) lets
// a pause copy every mapped segment to pinned host memory, release the physical memory and keep the
// addresses; the resume maps new physical memory at the same addresses and copies the bytes back.
// Every pointer that a tensor, a paused step's autograd graph, a CUDA graph or an NCCL registration
// holds stays valid. The order, the pinned pool and every undo live here in plain C++; the calls
// come through MoveCalls, which a CUDA build fills with the driver's and the tests with a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hydro/host_memory.h"
#include "hydro/status.h"

namespace hydro {

// A mapped range of device memory: its address stays reserved while its bytes are on the host.
// An idle one holds no tensor (its allocator's cache): released with no copy, mapped back empty.
struct Segment {
  uint64_t address = 0;
  uint64_t bytes = 0;
  bool idle = false;
};

struct MoveCalls {
  std::function<std::vector<Segment>()> segments;                   // every segment mapped now
  std::function<std::vector<uint64_t>()> idle;                      // optional: the idle ones' addresses
  std::function<HostRoom()> host_available;                         // host memory free, beyond the pool's
  std::function<Status(uint64_t bytes, void** host)> pin;           // page-locked host memory
  std::function<void(void* host, uint64_t bytes)> unpin;            // ... given back
  std::function<Status(const Segment&, void* host)> copy_out;       // queued: device to host
  std::function<Status(const Segment&, const void* host)> copy_in;  // queued: host to device
  std::function<Status()> wait_copies;                              // every queued copy done
  std::function<Status(const Segment&)> unmap;                      // physical memory released, address kept
  std::function<Status(const Segment&)> map;                        // new physical memory at the same address
  std::function<std::chrono::steady_clock::time_point()> now = std::chrono::steady_clock::now;
};

// Page-locked host memory, pinned once and kept between pauses: pinning inside a pause costs more
// than the copies (torch_memory_saver PR #86: a resume from 4.8 s to 0.6 s once kept). It grows,
// given back and pinned anew, only when a move needs more than it holds, by an eighth more than
// that need, and only where host memory has room for it (fits_in_host, hydro/gpu_release.h).
class PinnedPool {
 public:
  PinnedPool(std::function<Status(uint64_t, void**)> pin, std::function<void(void*, uint64_t)> unpin);
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // At least `bytes` pinned; `room`: host memory free beyond what the pool holds now.
  Status reserve(uint64_t bytes, const HostRoom& room);
  char* data() const { return static_cast<char*>(data_); }
  uint64_t capacity() const { return capacity_; }
  int pins() const { return pins_; }  // how many times memory was pinned

 private:
  std::function<Status(uint64_t, void**)> pin_;
  std::function<void(void*, uint64_t)> unpin_;
  void* data_ = nullptr;
  uint64_t capacity_ = 0;
  int pins_ = 0;
};

// The caller has drained the device first (the pause's drain): no thread queues work on these
// segments while a release or a restore runs, since the copies go on a stream of their own.
class DeviceMove {
 public:
  DeviceMove(MoveCalls calls, std::function<void(const std::string&)> log);

  // Before any pause (the Runtime's start): pins room for `bytes` of device memory, so that a
  // first release pins nothing inside Slurm's grace time.
  Status prepare(uint64_t bytes);
  // Copies every mapped segment that is not idle to the pool, then releases each one's physical
  // memory, the idle ones' too. On any
  // failure it undoes what it did (maps back and refills the segments it released) and says why:
  // the device memory is as it was. An error from the undo is kept: restore() returns it.
  Status release();
  // Releases the idle segments' physical memory only, with no copy (a release of the cache where
  // the move itself does not fit); restore() maps them back. The same undo as release().
  Status release_idle();
  // Maps each released segment at its address again and copies its bytes back. An error means the
  // device memory is lost: the caller ends the job, to be requeued from its last checkpoint.
  Status restore();
  bool holding() const { return !moved_.empty(); }
  bool lost() const { return !lost_.ok(); }  // an undo or a restore failed: restore() says why
  uint64_t mapped_bytes() const;             // the bytes of every segment mapped now
  uint64_t data_bytes() const;               // ... of those that are not idle: what a release copies
  uint64_t moved_bytes() const;              // what the last release copied
  const PinnedPool& pool() const { return pool_; }

 private:
  Status copy_all_out();
  Status release_each();
  Status refill(size_t count);
  std::vector<Segment> mapped_now() const;  // the segments, the idle ones marked
  void note_lost(const std::string& step, const Status& why);

  MoveCalls calls_;
  std::function<void(const std::string&)> log_;
  PinnedPool pool_;
  std::vector<Segment> moved_;  // what release() took, in the pool's order
  Status lost_;
};

}  // namespace hydro
