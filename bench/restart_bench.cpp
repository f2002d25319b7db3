// Restart to first step, measured side by side in one run, interleaved, for several state sizes.
// Each round starts two fresh processes from this binary:
//   plain  process start, build the model, torch::load of the same state from one file (no
//          checks), one training step;
//   hydro  process start, build the model, hydro::Runtime::resume() from the checkpoint directory
//          (find `latest`, verify the manifest and every file's xxhash, load, RNG), one step.
// The time runs from just before the parent starts the child to the child's first step done
// (steady_clock is CLOCK_MONOTONIC, the same in both processes). Prints medians and the median of
// the per-round ratios. The files are read warm (page cache), as on a requeue to the same node.
// Usage: hydro-bench-restart --help (the text is in main()).
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_usage.h"
#include "hydro/durable_fs.h"
#include "hydro/runtime.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A model of `mb` MB of parameters (16 MiB layers), trained with SGD with momentum: the optimizer's
// state doubles it.
struct Model : torch::nn::Module {
  explicit Model(int64_t mb) {
    int64_t bytes = mb << 20;
    const int64_t per = 16 << 20;
    for (int64_t i = 0; bytes > 0; ++i, bytes -= per)
      params.push_back(register_parameter("w" + std::to_string(i), torch::rand({std::min(per, bytes) / 4})));
  }
  torch::Tensor loss() {
    torch::Tensor l = torch::zeros({});
    for (auto& p : params) l = l + p.sum();
    return l;
  }
  std::vector<torch::Tensor> params;
};

void step(Model& m, torch::optim::SGD& opt) {
  opt.zero_grad();
  m.loss().backward();
  opt.step();
}

hydro::Settings settings(const std::string& dir) {
  hydro::Settings s;
  s.checkpoint_dir = dir;
  s.pause = false;
  s.keep_last = 1;
  return s;
}

// Child: from process start to the first step; prints the steady_clock time it was done.
int child(const std::string& mode, const std::string& dir, int64_t mb) {
  torch::manual_seed(0);
  Model m(mb);
  torch::optim::SGD opt(m.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  if (mode == "plain") {
    torch::serialize::InputArchive a;
    a.load_from(dir + "/plain.pt");
    torch::serialize::InputArchive ma, oa;
    a.read("model", ma);
    a.read("optimizer", oa);
    m.load(ma);
    opt.load(oa);
    step(m, opt);
  } else {
    hydro::Runtime rt(settings(dir + "/hydro"));
    rt.track("model", m);
    rt.track("optimizer", opt);
    if (rt.resume() != 1) return 3;
    step(m, opt);
  }
  std::printf("%lld\n", static_cast<long long>(now_ns()));
  return 0;
}

// Parent: one timed child run; seconds from spawn to its first step.
double timed(const char* self, const std::string& mode, const std::string& dir, int64_t mb) {
  std::string mbs = std::to_string(mb);
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char* argv[] = {const_cast<char*>(self),        const_cast<char*>("--child"),   const_cast<char*>(mode.c_str()),
                  const_cast<char*>(dir.c_str()), const_cast<char*>(mbs.c_str()), nullptr};
  int64_t t0 = now_ns();
  pid_t pid;
  if (posix_spawn(&pid, self, &fa, nullptr, argv, environ) != 0) std::abort();
  ::close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || out.empty()) {
    std::fprintf(stderr, "hydro-bench-restart: the %s child failed\n", mode.c_str());
    std::exit(1);
  }
  return (std::stoll(out) - t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--child") return child(argv[2], argv[3], std::atoll(argv[4]));
  hydro_bench::exit_on_options(
      argc, argv,
      "usage: hydro-bench-restart [DIR] [MB...]\n  restart to the first step, hydro's resume against "
      "a plain torch::load, per state size (default DIR /tmp/hydro-bench-restart, MB 10 100 1000)");
  std::string root = argc > 1 ? argv[1] : "/tmp/hydro-bench-restart";
  std::vector<int64_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {10, 100, 1000};
  const int rounds = 7;
  std::printf("restart to first step: process start, load, one step (medians of %d interleaved rounds)\n", rounds);
  std::printf("%8s %10s %10s %12s\n", "model MB", "plain s", "hydro s", "hydro/plain");
  for (int64_t mb : sizes) {
    std::string dir = root + "/" + std::to_string(mb);
    (void)hydro::posix_fs().remove_tree(dir);
    (void)hydro::posix_fs().make_dirs(dir, 0700);
    {
      torch::manual_seed(0);
      Model m(mb);
      torch::optim::SGD opt(m.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
      step(m, opt);
      torch::serialize::OutputArchive a, ma, oa;
      m.save(ma);
      opt.save(oa);
      a.write("model", ma);
      a.write("optimizer", oa);
      a.save_to(dir + "/plain.pt");
      hydro::Runtime rt(settings(dir + "/hydro"));
      rt.track("model", m);
      rt.track("optimizer", opt);
      rt.save(1);
    }
    std::vector<double> plain, hydro, ratio;
    timed(argv[0], "plain", dir, mb);  // warm the page cache and the binary
    timed(argv[0], "hydro", dir, mb);
    for (int r = 0; r < rounds; ++r) {
      bool hydro_first = r % 2;
      double h = 0, p = 0;
      if (hydro_first) h = timed(argv[0], "hydro", dir, mb);
      p = timed(argv[0], "plain", dir, mb);
      if (!hydro_first) h = timed(argv[0], "hydro", dir, mb);
      plain.push_back(p);
      hydro.push_back(h);
      ratio.push_back(h / p);
    }
    std::printf("%8lld %10.3f %10.3f %11.2fx\n", static_cast<long long>(mb), median(plain), median(hydro),
                median(ratio));
    std::fflush(stdout);
    (void)hydro::posix_fs().remove_tree(dir);
  }
  return 0;
}
