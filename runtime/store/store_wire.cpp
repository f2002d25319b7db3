#include "store_wire.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace hydro::store {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
Status ready(int fd, short events, Deadline& deadline) {
  for (;;) {
    const auto wait = deadline.next_wait();
    if (wait.count() <= 0) return Status::io("the ranks' store: timed out on the connection");
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(wait.count()));
    if (n > 0) return Status::OK();
    if (n < 0 && errno != EINTR) return Status::from_errno(errno, "the ranks' store: poll");
  }
}

Status write_all(int fd, const char* p, size_t n, Deadline& deadline) {
  while (n > 0) {
    HYDRO_RETURN_IF_ERROR(ready(fd, POLLOUT, deadline));
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w < 0) return Status::from_errno(errno, "the ranks' store: send");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

// Reads exactly n bytes; *closed is set when the peer closed before the first byte.
Status read_all(int fd, char* p, size_t n, Deadline& deadline, bool* closed) {
  size_t got = 0;
  while (got < n) {
    HYDRO_RETURN_IF_ERROR(ready(fd, POLLIN, deadline));
    ssize_t r = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return Status::from_errno(errno, "the ranks' store: recv");
    if (r == 0) {
      if (got == 0 && closed) *closed = true;
      return Status::io("the ranks' store: the connection closed mid-frame");
    }
    got += static_cast<size_t>(r);
  }
  return Status::OK();
}

void put_u32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

Status send_frame(int fd, const std::string& payload, Deadline& deadline) {
  std::string head;
  put_u32(&head, static_cast<uint32_t>(payload.size()));
  HYDRO_RETURN_IF_ERROR(write_all(fd, head.data(), head.size(), deadline));
  return write_all(fd, payload.data(), payload.size(), deadline);
}

Status recv_frame(int fd, size_t max, Deadline& deadline, std::string* payload) {
  char head[4];
  bool closed = false;
  Status s = read_all(fd, head, sizeof head, deadline, &closed);
  if (closed) return Status::not_found("the ranks' store: the peer closed the connection");
  HYDRO_RETURN_IF_ERROR(s);
  uint32_t n = get_u32(head);
  if (n > max) return Status::io("the ranks' store: a frame of " + std::to_string(n) + " bytes is over the limit");
  payload->resize(n);
  return read_all(fd, payload->data(), n, deadline, nullptr);
}

std::string request(Op op, const std::string& key, const std::string& arg) {
  std::string r(1, static_cast<char>(op));
  put_u32(&r, static_cast<uint32_t>(key.size()));
  return r + key + arg;
}

bool parse_request(const std::string& frame, Op* op, std::string* key, std::string* arg) {
  if (frame.size() < 5) return false;
  *op = static_cast<Op>(frame[0]);
  uint32_t n = get_u32(frame.data() + 1);
  if (n > frame.size() - 5) return false;
  key->assign(frame, 5, n);
  arg->assign(frame, 5 + n, std::string::npos);
  return *op == kSet || *op == kGet || *op == kAdd || *op == kDelete || *op == kGetAll;
}

std::string encode_list(const std::vector<std::string>& items) {
  std::string s;
  put_u32(&s, static_cast<uint32_t>(items.size()));
  for (const auto& item : items) {
    put_u32(&s, static_cast<uint32_t>(item.size()));
    s += item;
  }
  return s;
}

bool decode_list(const std::string& s, std::vector<std::string>* items) {
  if (s.size() < 4) return false;
  uint32_t n = get_u32(s.data());
  size_t at = 4;
  items->clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (s.size() - at < 4) return false;
    uint32_t len = get_u32(s.data() + at);
    at += 4;
    if (len > s.size() - at) return false;
    items->emplace_back(s, at, len);
    at += len;
  }
  return at == s.size();
}

std::string encode_i64(int64_t v) {
  std::string s;
  put_u32(&s, static_cast<uint32_t>(static_cast<uint64_t>(v) & 0xffffffffu));
  put_u32(&s, static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32));
  return s;
}

bool decode_i64(const std::string& s, int64_t* v) {
  if (s.size() != 8) return false;
  *v = static_cast<int64_t>(static_cast<uint64_t>(get_u32(s.data())) |
                            (static_cast<uint64_t>(get_u32(s.data() + 4)) << 32));
  return true;
}

Status nonce(std::string* hex) {
  unsigned char b[32];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "getrandom");
    got += static_cast<size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  hex->clear();
  for (unsigned char c : b) {
    hex->push_back(digits[c >> 4]);
    hex->push_back(digits[c & 15]);
  }
  return Status::OK();
}

}  // namespace hydro::store
