#include "python_oracle.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>

extern char** environ;

namespace hydro::test {

int run_python(const std::string& script, std::string* out) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  const char* argv[] = {HYDRO_TEST_PYTHON, "-c", script.c_str(), nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return -1;
  }
  out->clear();
  char buf[65536];
  ssize_t got;
  while ((got = ::read(fds[0], buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(got));
  ::close(fds[0]);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string python_torch_problem() {
  std::string out;
  int rc = run_python("import torch.utils.data; print(torch.__version__)", &out);
  if (rc == 0) return "";
  return std::string(HYDRO_TEST_PYTHON) + " cannot import torch (exit status " + std::to_string(rc) +
         "), which the sampler tests compare against: run scripts/setup";
}

const std::vector<int64_t>& oracle_sizes() {
  static const std::vector<int64_t> sizes = {1, 2, 3, 5, 7, 10, 13, 64, 257, 1000};
  return sizes;
}

const std::vector<uint64_t>& oracle_seeds() {
  static const std::vector<uint64_t> seeds = {0, 1, 12345};
  return seeds;
}

namespace {

std::string list(const std::string& items) { return "[" + items + "]"; }

template <typename T>
std::string join(const std::vector<T>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::map<SamplerCase, std::vector<size_t>> compute(std::string* error) {
  const std::string script =
      "import sys\n"
      "from torch.utils.data import DistributedSampler\n"
      "out = []\n"
      "for n in " +
      list(join(oracle_sizes())) +
      ":\n"
      "  for w in range(1, 5):\n"
      "    for r in range(w):\n"
      "      for seed in " +
      list(join(oracle_seeds())) +
      ":\n"
      "        for sh in (0, 1):\n"
      "          for dl in (0, 1):\n"
      "            s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=bool(sh), seed=seed,\n"
      "                                   drop_last=bool(dl))\n"
      "            for e in range(3):\n"
      "              s.set_epoch(e)\n"
      "              out.append('%d %d %d %d %d %d %d :%s' % (n, w, r, seed, e, sh, dl,\n"
      "                         ''.join(' %d' % i for i in s)))\n"
      "sys.stdout.write('\\n'.join(out) + '\\n')\n";
  std::map<SamplerCase, std::vector<size_t>> cases;
  std::string text;
  int rc = run_python(script, &text);
  if (rc != 0) {
    *error = std::string(HYDRO_TEST_PYTHON) + " with torch.utils.data.DistributedSampler failed (exit status " +
             std::to_string(rc) + "); " + python_torch_problem();
    return cases;
  }
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    SamplerCase c;
    int sh = 0, dl = 0;
    char colon = 0;
    in >> c.n >> c.world >> c.rank >> c.seed >> c.epoch >> sh >> dl >> colon;
    c.shuffle = sh != 0;
    c.drop_last = dl != 0;
    std::vector<size_t> seq;
    for (size_t i; in >> i;) seq.push_back(i);
    cases[c] = std::move(seq);
  }
  return cases;
}

}  // namespace

const std::map<SamplerCase, std::vector<size_t>>& distributed_sampler_oracle(std::string* error) {
  static std::string failure;
  static const std::map<SamplerCase, std::vector<size_t>> cases = compute(&failure);
  *error = failure;
  return cases;
}

}  // namespace hydro::test
