// Status: the error value the core returns instead of throwing (leveldb's idea).
#pragma once

#include <string>
#include <utility>

namespace hydro {

enum class Code {
  ok,
  invalid_argument,      // bad input from the user or the admin
  not_found,             // a file or checkpoint that does not exist
  io,                    // a system call failed; nothing was committed
  corruption,            // data on disk does not match its manifest
  durability_uncertain,  // committed and visible, but a later fsync failed (only that)
};

class Status {
 public:
  Status() = default;
  static Status OK() { return Status(); }
  static Status invalid_argument(std::string msg) { return Status(Code::invalid_argument, std::move(msg)); }
  static Status not_found(std::string msg) { return Status(Code::not_found, std::move(msg)); }
  static Status io(std::string msg) { return Status(Code::io, std::move(msg)); }
  static Status corruption(std::string msg) { return Status(Code::corruption, std::move(msg)); }
  static Status durability_uncertain(std::string msg) { return Status(Code::durability_uncertain, std::move(msg)); }
  static Status with_code(Code c, std::string msg) { return c == Code::ok ? Status() : Status(c, std::move(msg)); }
  // The one place errno becomes a Status: "what: strerror(err)".
  static Status from_errno(int err, const std::string& what);

  bool ok() const { return code_ == Code::ok; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string to_string() const;

 private:
  Status(Code c, std::string m) : code_(c), msg_(std::move(m)) {}
  Code code_ = Code::ok;
  std::string msg_;
};

const char* code_name(Code c);   // for people: "I/O error"
const char* code_token(Code c);  // for machines: "io"
bool code_from_token(const std::string& token, Code* out);

}  // namespace hydro

#define HYDRO_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::hydro::Status hydro_status_ = (expr);        \
    if (!hydro_status_.ok()) return hydro_status_; \
  } while (0)
