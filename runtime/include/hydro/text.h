// Small text helpers the core and the store share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hydro {

// "a,,b" -> {"a", "", "b"}; "" -> {""}: every field, empty ones too.
std::vector<std::string> split(const std::string& s, char sep);

// 3 << 20 -> "3 MiB": whole MiB, rounded down, for the log.
std::string mib(uint64_t bytes);

// `s` up to its first line break: an exception's message without the backtrace libtorch appends.
std::string first_line(const std::string& s);

}  // namespace hydro
