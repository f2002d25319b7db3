// The training stall of an async checkpoint (HYDRO_CKPT_MODE=async), measured side by side in one
// run, interleaved, for several state sizes (a model whose SGD momentum doubles its bytes):
//   memcpy  a plain copy of the same number of bytes into a buffer allocated once and reused;
//   stall   hydro::Runtime::save() in async mode: the time the training thread waits (copying the
//           parameters and optimizer state into reused host buffers); the write runs in the
//           background and is waited for, untimed, before the next variant;
//   torch   plain torch::save of the same model and optimizer (two files, no fsync, no atomicity):
//           what training would wait for without hydro;
// (bench/checkpoint_bench measures the synchronous save; one process holds one Runtime.)
// Prints medians and the medians of the per-round stall/memcpy and stall/torch ratios.
// Usage: hydro-bench-async --help (the text is in main()).
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_usage.h"
#include "hydro/durable_fs.h"
#include "hydro/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
using hydro_bench::median;
double secs(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
struct Model : torch::nn::Module {
  explicit Model(int64_t bytes) {
    const int64_t per = 16 << 20;
    for (int64_t i = 0; bytes > 0; ++i, bytes -= per)
      register_parameter("w" + std::to_string(i), torch::rand({std::min(per, bytes) / 4}));
  }
};

// One round: memcpy, hydro's async save (its stall, then its whole write) and torch::save, in a
// shuffled order. t[]: memcpy, stall, stall + write, torch.
void run_round(const std::string& dir, Model& model, torch::optim::SGD& opt, hydro::Runtime& rt, std::vector<char>& src,
               std::vector<char>& dst, std::mt19937& rng, int64_t* step, double t[4]) {
  const std::string plain_model = dir + "/plain-model.pt", plain_optimizer = dir + "/plain-optimizer.pt";
  int order[3] = {0, 1, 2};
  std::shuffle(order, order + 3, rng);
  for (int v : order) {
    auto t0 = Clock::now();
    if (v == 0) {
      std::memcpy(dst.data(), src.data(), src.size());
      t[0] = secs(t0);
    } else if (v == 1) {
      rt.save((*step)++);
      t[1] = secs(t0);
      rt.wait_idle();  // the background write, untimed by the training thread
      t[2] = secs(t0);
    } else {
      torch::serialize::OutputArchive m, o;
      model.save(m);
      m.save_to(plain_model);
      opt.save(o);
      o.save_to(plain_optimizer);
      t[3] = secs(t0);
      ::unlink(plain_model.c_str());
      ::unlink(plain_optimizer.c_str());
    }
  }
}

void measure_size(const std::string& dir, int64_t mb, std::mt19937& rng) {
  const int64_t bytes = mb * 1000 * 1000;
  Model model(bytes / 2);
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  for (auto& p : model.parameters()) p.mutable_grad() = torch::zeros_like(p);
  opt.step();  // creates the momentum buffers
  std::vector<char> src(static_cast<size_t>(bytes), 'x'), dst(static_cast<size_t>(bytes), 'y');
  hydro::Settings as;
  as.checkpoint_dir = dir + "/async";
  as.keep_last = 1;
  as.pause = false;
  as.mode = hydro::CheckpointMode::async;
  hydro::Runtime async_rt(as);
  async_rt.track("model", model);
  async_rt.track("optimizer", opt);
  int64_t step = 0;
  async_rt.save(step++);  // warm up: the reused buffers are allocated and touched once
  async_rt.wait_idle();
  const int runs = mb >= 1000 ? 3 : 7;
  std::vector<double> copy_t, torch_t, stall_t, sync_t, ratio, ratio_torch;
  for (int r = 0; r < runs; ++r) {
    double t[4];
    run_round(dir, model, opt, async_rt, src, dst, rng, &step, t);
    copy_t.push_back(t[0]);
    stall_t.push_back(t[1]);
    sync_t.push_back(t[2]);
    torch_t.push_back(t[3]);
    ratio.push_back(t[1] / t[0]);
    ratio_torch.push_back(t[1] / t[3]);
  }
  std::printf("%6lldMB %5d | %9.4f %9.4f %9.4f %9.3f | %12.2fx %11.2fx\n", static_cast<long long>(mb), runs,
              median(copy_t), median(torch_t), median(stall_t), median(sync_t), median(ratio), median(ratio_torch));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  hydro_bench::exit_on_options(
      argc, argv,
      "usage: hydro-bench-async [DIR] [MB...]\n  the training stall of an async checkpoint against memcpy and "
      "torch::save, per state size (default DIR /tmp/hydro-bench-async, MB 10 100 1000 2000)");
  std::string dir = argc > 1 ? argv[1] : "/tmp/hydro-bench-async";
  std::vector<int64_t> sizes_mb;
  for (int i = 2; i < argc; ++i) sizes_mb.push_back(std::atoll(argv[i]));
  if (sizes_mb.empty()) sizes_mb = {10, 100, 1000, 2000};
  torch::set_num_threads(1);
  (void)hydro::posix_fs().remove_tree(dir);
  std::printf("directory %s; state = parameters + SGD momentum\n", dir.c_str());
  std::printf("%8s %5s | %9s %9s %9s %9s | %13s %12s\n", "state", "runs", "memcpy s", "torch s", "stall s", "write s",
              "stall/memcpy", "stall/torch");
  std::mt19937 rng(1);
  for (int64_t mb : sizes_mb) measure_size(dir, mb, rng);
  (void)hydro::posix_fs().remove_tree(dir);
  return 0;
}
