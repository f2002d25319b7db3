#include "hydro/status.h"

#include <cstring>

namespace hydro {

const char* code_name(Code c) {
  switch (c) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid argument";
    case Code::not_found: return "not found";
    case Code::io: return "I/O error";
    case Code::corruption: return "corruption";
    case Code::durability_uncertain: return "durability uncertain";
  }
  return "unknown";
}

namespace {
constexpr Code kCodes[] = {Code::ok, Code::invalid_argument, Code::not_found,
                           Code::io, Code::corruption,       Code::durability_uncertain};
}  // namespace

const char* code_token(Code c) {
  switch (c) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid_argument";
    case Code::not_found: return "not_found";
    case Code::io: return "io";
    case Code::corruption: return "corruption";
    case Code::durability_uncertain: return "durability_uncertain";
  }
  return "unknown";
}

bool code_from_token(const std::string& token, Code* out) {
  for (Code c : kCodes)
    if (token == code_token(c)) {
      *out = c;
      return true;
    }
  return false;
}

Status Status::from_errno(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOENT) return not_found(std::move(msg));
  return io(std::move(msg));
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(code_name(code_)) + ": " + msg_;
}

}  // namespace hydro
