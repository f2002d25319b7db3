// Starts the built hydro-launch with ARGS and the extra environment ENV (NAME=value), its stderr
// into ERR_PATH. For the tests that run hydro-launch as a whole process.
#pragma once

#include <sys/wait.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
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

struct LaunchResult {
  int status;
  std::string err;
};

// Runs hydro-launch to its end (its stderr in DIR/launcher.err). With `send_signal`, sends it once
// the program has touched DIR/ready.
inline LaunchResult run_launcher(const std::vector<std::string>& args, const std::vector<std::string>& env,
                                 const std::string& dir, int send_signal = 0) {
  std::string err_path = dir + "/launcher.err";
  pid_t pid = spawn_launcher(args, env, err_path);
  if (send_signal) {
    for (int i = 0; i < 10000 && ::access((dir + "/ready").c_str(), F_OK) != 0; ++i) ::usleep(1000);
    ::kill(pid, send_signal);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::ifstream f(err_path);
  return {status, std::string(std::istreambuf_iterator<char>(f), {})};
}

// `show job` prints a job with PreemptTime=PREEMPT (a real Slurm's preemption is tested in
// tests/integration/preempt.sh) and EndTime=END, and records nothing. END "+N": N seconds after
// the first `show` (so that no delay in starting hydro-launch eats into it), kept in a file.
inline std::string fake_scontrol(const std::string& dir, const std::string& preempt = "None",
                                 const std::string& end = "Unknown") {
  const std::string path = dir + "/scontrol";
  const std::string end_file = dir + "/scontrol.end";
  const bool from_first_show = end.rfind('+', 0) == 0;
  {
    std::ofstream f(path);
    f << "#!/bin/sh\nif [ \"$1\" = show ]; then\n";
    if (from_first_show)
      f << "  [ -f " << end_file << " ] || date -d \"@$(( $(date +%s) " << end << " ))\" +%Y-%m-%dT%H:%M:%S > "
        << end_file << "\n";
    f << "  echo '   JobState=RUNNING'; echo '   PreemptEligibleTime=2026-11-23T05:47:01 PreemptTime=" << preempt
      << "'; echo \"   StartTime=2026-11-23T05:40:00 EndTime=" << (from_first_show ? "$(cat " + end_file + ")" : end)
      << " Deadline=N/A\"; exit 0\nfi\n"
      << "echo \"$@\" > " << dir << "/scontrol.args\n";
  }
  ::chmod(path.c_str(), 0755);
  return path;
}

// Shell lines for a test's program that wait (up to 30 s) for what the test's signal brings about,
// rather than sleep a while and hope it came: hydro-launch has written `text` to launcher.err
// (run_launcher's), or `signo` is pending for the shell (bash keeps the mask it starts with).
inline std::string until_true(const std::string& condition) {
  return "for i in $(seq 3000); do " + condition + " && break; sleep 0.01; done; ";
}
inline std::string until_logged(const std::string& dir, const std::string& text) {
  return until_true("grep -qF '" + text + "' " + dir + "/launcher.err");
}
inline std::string until_pending(int signo) {
  return until_true("p=$(sed -n 's/^ShdPnd:[[:space:]]*//p' /proc/$$/status); [ $((0x$p & " +
                    std::to_string(1ull << (signo - 1)) + ")) != 0 ]");
}

}  // namespace hydro::test
