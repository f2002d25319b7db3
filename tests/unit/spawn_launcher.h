// Starts the built hydro-launch with ARGS and the extra environment ENV (NAME=value), its stderr
// into ERR_PATH. For the tests that run hydro-launch as a whole process.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace hydro::test {

inline pid_t spawn_launcher(const std::vector<std::string>& args, const std::vector<std::string>& env,
                            const std::string& err_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    if (!std::freopen(err_path.c_str(), "w", stderr)) ::_exit(126);
    std::vector<char*> argv{const_cast<char*>(HYDRO_LAUNCH_BIN)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace hydro::test
