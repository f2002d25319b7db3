// What every bench shares. The benches take positional arguments only: -h or --help prints the
// usage and exits 0; any other argument that starts with '-' is an error that names it (it would
// otherwise be read as a path or a number). And the median they report.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace hydro_bench {

// Returns only when argv holds no option; else prints the usage (stdout for help, stderr for a
// bad option) and exits.
inline void exit_on_options(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::printf("%s\n", usage);
      std::exit(0);
    }
    if (argv[i][0] == '-' && argv[i][1] != '\0') {
      std::fprintf(stderr, "unknown option %s\n%s\n", argv[i], usage);
      std::exit(2);
    }
  }
}

// The median of `v` (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace hydro_bench
