// Checkpoint writes, measured side by side in one run, interleaved, for several state sizes:
//   raw    the same number of bytes written to one new file, then fsync (what dd conv=fsync does):
//          the directory's sequential durable write bandwidth;
//   torch  plain torch::save of the same module to one file: no fsync, no atomicity;
//   hydro  hydro::Runtime::save: serialize, checksum, fsync every file, manifest, rename, `latest`
//          (the time training waits; removing old checkpoints runs in the background, untimed).
// Prints medians and the medians of the per-round ratios. Usage: hydro-bench-checkpoint [DIR] [MB...]
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "hydro/durable_fs.h"
#include "hydro/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct State : torch::nn::Module {
  explicit State(int64_t bytes) {
    const int64_t per = 16 << 20;  // 16 MiB tensors, like the layers of a model
    for (int64_t i = 0; bytes > 0; ++i, bytes -= per)
      register_parameter("w" + std::to_string(i), torch::rand({std::min(per, bytes) / 4}));
  }
};

double raw_write(const std::string& path, const std::vector<char>& buf) {
  auto t = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  for (size_t off = 0; off < buf.size();) {
    ssize_t w = ::write(fd, buf.data() + off, std::min<size_t>(buf.size() - off, 8 << 20));
    if (w <= 0) std::abort();
    off += static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  return secs(t);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "/tmp/hydro-bench-ck";
  std::vector<int64_t> sizes_mb;
  for (int i = 2; i < argc; ++i) sizes_mb.push_back(std::atoll(argv[i]));
  if (sizes_mb.empty()) sizes_mb = {10, 100, 1000, 2000};
  (void)hydro::posix_fs().remove_tree(dir);
  (void)hydro::posix_fs().make_dirs(dir, 0700);
  std::printf("directory %s\n", dir.c_str());
  std::printf("%8s %5s | %9s %9s %9s | %13s %13s\n", "state", "runs", "raw s", "torch s", "hydro s",
              "hydro/raw bw", "hydro/torch t");
  std::mt19937 rng(1);
  for (int64_t mb : sizes_mb) {
    const int64_t bytes = mb * 1000 * 1000;
    State state(bytes);
    std::vector<char> buf(static_cast<size_t>(bytes), 'x');
    hydro::Settings s;
    s.checkpoint_dir = dir + "/ck";
    s.keep_last = std::getenv("HYDRO_BENCH_KEEP") ? std::atoi(std::getenv("HYDRO_BENCH_KEEP")) : 1;
    s.pause = false;
    hydro::Runtime rt(s);
    rt.track("model", state);
    const int runs = mb >= 1000 ? 3 : 5;
    std::vector<double> raw, torch_t, hydro_t, bw_ratio, t_ratio;
    int64_t step = 0;
    rt.save(step++);  // warm up: allocations, page cache
    for (int r = 0; r < runs; ++r) {
      double t[3];
      int order[3] = {0, 1, 2};
      std::shuffle(order, order + 3, rng);
      for (int v : order) {
        ::sync();
        if (v == 0) {
          t[0] = raw_write(dir + "/raw.bin", buf);
          ::unlink((dir + "/raw.bin").c_str());
        } else if (v == 1) {
          auto t0 = Clock::now();
          torch::serialize::OutputArchive a;
          state.save(a);
          a.save_to(dir + "/plain.pt");
          t[1] = secs(t0);
          ::unlink((dir + "/plain.pt").c_str());
        } else {
          auto t0 = Clock::now();
          rt.save(step++);
          t[2] = secs(t0);  // what training waits for; old checkpoints are removed in the background
          rt.wait_idle();   // ...which must not slow the next variant down
        }
      }
      raw.push_back(t[0]);
      torch_t.push_back(t[1]);
      hydro_t.push_back(t[2]);
      bw_ratio.push_back(t[0] / t[2]);
      t_ratio.push_back(t[2] / t[1]);
    }
    std::printf("%6lldMB %5d | %9.3f %9.3f %9.3f | %12.0f%% %12.2fx\n", static_cast<long long>(mb), runs,
                median(raw), median(torch_t), median(hydro_t), median(bw_ratio) * 100, median(t_ratio));
    std::fflush(stdout);
  }
  (void)hydro::posix_fs().remove_tree(dir);
  return 0;
}
