// hydro's JSON documents that others can write (a manifest on a shared disk, a rank's message
// through the store) hold whole numbers only. A document with a number that has a fraction or an
// exponent is refused before any field is read: nlohmann's get<integer>() of such a number beyond
// the integer's range is undefined behaviour (found by fuzz.manifest and fuzz.group_message).
#pragma once

#include <nlohmann/json.hpp>

namespace hydro {

inline bool only_whole_numbers(const nlohmann::json& j) {
  if (j.is_number_float()) return false;
  if (j.is_structured())
    for (const auto& v : j)
      if (!only_whole_numbers(v)) return false;
  return true;
}

}  // namespace hydro
