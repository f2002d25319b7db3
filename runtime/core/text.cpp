#include "hydro/text.h"

namespace hydro {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace hydro
