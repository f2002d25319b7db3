// Small text helpers the core and the store share.
#pragma once

#include <string>
#include <vector>

namespace hydro {

// "a,,b" -> {"a", "", "b"}; "" -> {""}: every field, empty ones too.
std::vector<std::string> split(const std::string& s, char sep);

}  // namespace hydro
