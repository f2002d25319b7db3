// Test support: what a call throws, as text.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace hydro::test {

// The what() of the exception f throws, or "no error" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace hydro::test
