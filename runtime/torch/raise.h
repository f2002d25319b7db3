// The C++ API's error model: a core Status that is not ok becomes std::runtime_error, its text
// "hydro: <code>: <message>". The Python binding turns that into a Python exception.
#pragma once

#include <stdexcept>
#include <string>

#include "hydro/status.h"

namespace hydro {

[[noreturn]] inline void throw_status(const Status& s) { throw std::runtime_error("hydro: " + s.to_string()); }

inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw_status(s);
}

}  // namespace hydro
