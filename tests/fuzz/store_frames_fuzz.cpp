// The ranks' store's frames as a socket delivers them (bytes from the network, before the peer is
// authenticated): each frame read is the next length-prefixed piece of the input, within the
// limit; a frame over the limit or cut short is an error that names the store, and the end of the
// input between two frames is the one "peer closed" answer.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "store_wire.h"

namespace store = hydro::store;

namespace {

uint32_t little_endian_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// Reads frames until the first error; returns the bytes the frames took.
size_t read_frames(int fd, const uint8_t* data, size_t size) {
  store::Deadline deadline(std::chrono::seconds(10));
  size_t at = 0;
  for (;;) {
    std::string payload;
    const hydro::Status s = store::recv_frame(fd, store::kMaxHandshake, deadline, &payload);
    if (!s.ok()) {
      FUZZ_CHECK(s.message().rfind("the ranks' store: ", 0) == 0);
      const bool whole = at == size;  // nothing left: the peer closed between two frames
      FUZZ_CHECK(whole == (s.code() == hydro::Code::not_found));
      const bool over = size - at >= 4 && little_endian_u32(data + at) > store::kMaxHandshake;
      FUZZ_CHECK(over == (s.message().find("over the limit") != std::string::npos));
      return at;
    }
    FUZZ_CHECK(size - at >= 4 + payload.size());
    FUZZ_CHECK(little_endian_u32(data + at) == payload.size());
    FUZZ_CHECK(payload == std::string(reinterpret_cast<const char*>(data) + at + 4, payload.size()));
    at += 4 + payload.size();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 32768) return 0;  // within one socket buffer: written whole before the reads
  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  FUZZ_CHECK(::write(fds[1], data, size) == static_cast<ssize_t>(size));
  ::close(fds[1]);
  read_frames(fds[0], data, size);
  ::close(fds[0]);
  return 0;
}
