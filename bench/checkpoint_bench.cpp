// Checkpoint writes, measured side by side in one run, interleaved, for several state sizes:
//   raw     the same number of bytes written to one new file in 8 MiB writes, then fsync (what
//           dd bs=8M conv=fsync does): the directory's sequential durable write bandwidth;
//   rawd    the same with O_DIRECT from one reused aligned buffer (dd bs=8M oflag=direct
//           conv=fsync): the device without the page cache;
//   torch   plain torch::save of the same module to one file: no fsync, no atomicity;
//   torch+f torch::save, then fsync of the file: durable, not atomic, no checksums;
//   core    the raw bytes and a small rng.pt through hydro's directory protocol alone (file
//           fsyncs, manifest, staging fsync, rename, root fsync, `latest`, root fsync): the floor
//           any durable, atomic save has here, with no serializing;
//   hydro   hydro::Runtime::save: serialize, checksum, fsync every file, manifest, rename, `latest`
//           (the time training waits; removing old checkpoints runs in the background, untimed).
// Every variant starts after sync(2). Prints medians and the medians of the per-round ratios.
// Usage: hydro-bench-checkpoint --help (the text is in main()).
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_usage.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/durable_fs.h"
#include "hydro/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
using hydro_bench::median;
double secs(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
struct State : torch::nn::Module {
  explicit State(int64_t bytes) {
    const int64_t per = 16 << 20;  // 16 MiB tensors, like the layers of a model
    for (int64_t i = 0; bytes > 0; ++i, bytes -= per)
      register_parameter("w" + std::to_string(i), torch::rand({std::min(per, bytes) / 4}));
  }
};

constexpr size_t kChunk = 8 << 20;

double raw_write(const std::string& path, const std::vector<char>& buf, char* aligned) {
  auto t = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (aligned ? O_DIRECT : 0), 0644);
  if (fd < 0) std::abort();
  for (size_t off = 0; off < buf.size();) {
    size_t n = std::min(buf.size() - off, kChunk);
    const char* from = buf.data() + off;
    if (aligned) {
      std::memcpy(aligned, from, n);
      from = aligned;
      if (n % 4096 != 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT);  // the tail, as dd does
    }
    ssize_t w = ::write(fd, from, n);
    if (w <= 0) std::abort();
    off += static_cast<size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  return secs(t);
}

double core_save(hydro::CheckpointDir& dir, int64_t step, const std::vector<char>& buf) {
  static const std::string rng(5000, 'r');
  auto t = Clock::now();
  std::unique_ptr<hydro::CheckpointWriter> w;
  if (!dir.begin(step, &w).ok() || !w->write_file("model.pt", buf.data(), buf.size()).ok() ||
      !w->write_file("rng.pt", rng).ok() || !w->commit().ok())
    std::abort();
  double d = secs(t);
  (void)dir.prune(1);  // untimed, as hydro's pruning is
  return d;
}

double torch_save(const std::string& path, State& state, bool durable) {
  auto t = Clock::now();
  torch::serialize::OutputArchive a;
  state.save(a);
  a.save_to(path);
  if (durable) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ::fsync(fd);
    ::close(fd);
  }
  return secs(t);
}

// One size's table row: every variant run `runs` times, interleaved in a shuffled order.
struct SizeRun {
  std::string dir;
  bool direct_io = true;
  bool print_rounds = false;
  char* aligned = nullptr;  // O_DIRECT's buffer
  std::mt19937* rng = nullptr;
};

constexpr int kVariants = 6;  // raw, rawd, torch, torch+f, hydro, core

// One round: each variant once, in a shuffled order; the durations in d[].
void run_round(const SizeRun& c, hydro::Runtime& rt, hydro::CheckpointDir& core, State& state,
               const std::vector<char>& buf, int r, int64_t* step, double d[kVariants]) {
  int order[kVariants] = {0, 1, 2, 3, 4, 5};
  std::shuffle(order, order + kVariants, *c.rng);
  for (int v : order) {
    ::sync();
    switch (v) {
      case 0: d[0] = raw_write(c.dir + "/raw.bin", buf, nullptr); break;
      case 1: d[1] = raw_write(c.dir + "/raw.bin", buf, c.aligned); break;
      case 2: d[2] = torch_save(c.dir + "/plain.pt", state, false); break;
      case 3: d[3] = torch_save(c.dir + "/plain.pt", state, true); break;
      case 4: {
        auto t0 = Clock::now();
        rt.save((*step)++);
        d[4] = secs(t0);  // what training waits for; old checkpoints are removed in the background
        rt.wait_idle();   // ...which must not slow the next variant down
        break;
      }
      case 5: d[5] = core_save(core, r, buf); break;
    }
    ::unlink((c.dir + "/raw.bin").c_str());
    ::unlink((c.dir + "/plain.pt").c_str());
  }
}

void measure_size(const SizeRun& c, int64_t mb) {
  const int64_t bytes = mb * 1000 * 1000;
  State state(bytes);
  std::vector<char> buf(static_cast<size_t>(bytes), 'x');
  hydro::Settings s;
  s.checkpoint_dir = c.dir + "/ck";
  s.keep_last = std::getenv("HYDRO_BENCH_KEEP") ? std::atoi(std::getenv("HYDRO_BENCH_KEEP")) : 1;
  s.pause = false;
  s.direct_io = c.direct_io;
  hydro::Runtime rt(s);
  rt.track("model", state);
  const int runs = mb >= 1000 ? 5 : 9;
  std::vector<double> t[kVariants], bw_raw, bw_rawd, core_raw, t_torch, t_torchf;
  hydro::CheckpointDir core(c.dir + "/core");
  if (!core.open().ok()) std::abort();
  int64_t step = 0;
  rt.save(step++);  // warm up: allocations, page cache
  for (int r = 0; r < runs; ++r) {
    double d[kVariants];
    run_round(c, rt, core, state, buf, r, &step, d);
    for (int v = 0; v < kVariants; ++v) t[v].push_back(d[v]);
    if (c.print_rounds)
      std::fprintf(stderr, "round %d: raw %.3f rawd %.3f torch %.3f torch+f %.3f hydro %.3f core %.3f\n", r, d[0], d[1],
                   d[2], d[3], d[4], d[5]);
    bw_raw.push_back(d[0] / d[4]);
    bw_rawd.push_back(d[1] / d[4]);
    core_raw.push_back(d[0] / d[5]);
    t_torch.push_back(d[4] / d[2]);
    t_torchf.push_back(d[4] / d[3]);
  }
  std::printf("%6lldMB %4d | %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f | %8.0f%% %8.0f%% %8.0f%% %8.2fx %8.2fx\n",
              static_cast<long long>(mb), runs, median(t[0]), median(t[1]), median(t[2]), median(t[3]), median(t[5]),
              median(t[4]), median(bw_raw) * 100, median(bw_rawd) * 100, median(core_raw) * 100, median(t_torch),
              median(t_torchf));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  hydro_bench::exit_on_options(
      argc, argv,
      "usage: hydro-bench-checkpoint [DIR] [MB...]\n  hydro's durable save against raw writes, torch::save and the "
      "bare directory protocol, per state size (default DIR /tmp/hydro-bench-ck, MB 10 100 1000 2000; "
      "HYDRO_BENCH_ROUNDS=1 prints every round on stderr)");
  SizeRun c;
  c.dir = argc > 1 ? argv[1] : "/tmp/hydro-bench-ck";
  std::vector<int64_t> sizes_mb;
  for (int i = 2; i < argc; ++i) sizes_mb.push_back(std::atoll(argv[i]));
  if (sizes_mb.empty()) sizes_mb = {10, 100, 1000, 2000};
  if (const char* d = std::getenv("HYDRO_CKPT_DIRECT_IO")) {
    hydro::Status st = hydro::parse_on_off(d, "HYDRO_CKPT_DIRECT_IO", &c.direct_io);
    if (!st.ok()) {
      std::fprintf(stderr, "hydro-bench-checkpoint: %s\n", st.message().c_str());
      return 2;
    }
  }
  (void)hydro::posix_fs().remove_tree(c.dir);
  (void)hydro::posix_fs().make_dirs(c.dir, 0700);
  std::printf("directory %s\n", c.dir.c_str());
  std::printf("%8s %4s | %7s %7s %7s %7s %7s %7s | %9s %9s %9s %9s %9s\n", "state", "runs", "raw s", "rawd s",
              "torch s", "torch+f", "core s", "hydro s", "bw/raw", "bw/rawd", "core/raw", "t/torch", "t/torch+f");
  c.print_rounds = std::getenv("HYDRO_BENCH_ROUNDS") != nullptr;
  std::mt19937 rng(1);
  c.rng = &rng;
  c.aligned = static_cast<char*>(std::aligned_alloc(4096, kChunk));
  std::memset(c.aligned, 0, kChunk);
  for (int64_t mb : sizes_mb) measure_size(c, mb);
  std::free(c.aligned);
  (void)hydro::posix_fs().remove_tree(c.dir);
  return 0;
}
