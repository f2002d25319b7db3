// hydro's pause, measured side by side in one run:
//  1. step-time overhead: no hydro vs hydro armed (handlers and watcher; no operator callback until a pause) vs the
//     same callback left enabled (what hydro avoids), in interleaved blocks; medians of paired ratios;
//  2. pause latency: signal sent -> training thread blocked at an operator, p50/p99, beside the
//     signal-delivery floor on this machine and a step-boundary-only pause;
//  3. resume latency: signal sent -> training thread running again;
//  4. the floor of any operator-boundary pause: signal sent -> the next operator starts, seen by a
//     callback registered all along.
// Models: A = MLP 64-256-256-10, batch 64; B = MLP 64-64-10, batch 16; SGD with momentum, 1 thread.
#include <ATen/record_function.h>
#include <pthread.h>
#include <signal.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include "bench_usage.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;
using hydro_bench::median;
double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

struct Model {
  const char* name;
  torch::nn::Sequential net;
  int64_t batch;
  std::unique_ptr<torch::optim::SGD> opt;
  Model(const char* n, std::vector<int64_t> dims, int64_t b) : name(n), batch(b) {
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      net->push_back(torch::nn::Linear(dims[i], dims[i + 1]));
      if (i + 2 < dims.size()) net->push_back(torch::nn::ReLU());
    }
    opt = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  void step() {
    auto x = torch::randn({batch, 64});
    auto y = torch::randint(0, 10, {batch});
    opt->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt->step();
  }
};

double time_steps(Model& m, int steps) {
  auto t = Clock::now();
  for (int i = 0; i < steps; ++i) m.step();
  return us_since(t) / steps;
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

std::unique_ptr<at::ObserverContext> noop(const at::RecordFunction&) { return nullptr; }

void overhead(Model& m, int blocks, int steps) {
  std::vector<double> armed_ratio, enabled_ratio;
  std::mt19937 rng(1);
  for (int i = 0; i < 50; ++i) m.step();  // warm up
  for (int b = 0; b < blocks; ++b) {
    double t_plain = 0, t_armed = 0, t_enabled = 0;
    int order[3] = {0, 1, 2};
    std::shuffle(order, order + 3, rng);
    // Each variant settles for a few untimed steps after its set-up (starting hydro's watcher
    // thread, registering a callback), so that the blocks compare steady-state step times.
    const int settle = 10;
    for (int v : order) {
      if (v == 0) {
        time_steps(m, settle);
        t_plain = time_steps(m, steps);
      } else if (v == 1) {
        hydro::Settings s;
        hydro::Runtime rt(s);
        time_steps(m, settle);
        t_armed = time_steps(m, steps);
      } else {
        auto h = at::addGlobalCallback(at::RecordFunctionCallback(noop).needsInputs(false));
        time_steps(m, settle);
        t_enabled = time_steps(m, steps);
        at::removeCallback(h);
      }
    }
    armed_ratio.push_back(t_armed / t_plain);
    enabled_ratio.push_back(t_enabled / t_plain);
  }
  double plain = time_steps(m, steps);
  std::fflush(stdout);
  std::printf(
      "%s  step %.1f us | hydro armed, not paused: %+.2f%% (median of %d paired blocks) | "
      "callback left enabled: %+.2f%%\n",
      m.name, plain, (median(armed_ratio) - 1) * 100, blocks, (median(enabled_ratio) - 1) * 100);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
// The main thread waits by sleeping, never by spinning: on 2 cores a spinning observer slows the
// very thread it measures. Each latency is taken from timestamps the measured thread records.
template <typename F>
void wait_until(F f) {
  while (!f()) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

// Silences hydro's per-pause log lines (fd 2) while a latency loop runs.
struct QuietStderr {
  int saved = ::dup(2);
  QuietStderr() {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);
    ::close(null);
  }
  ~QuietStderr() {
    ::dup2(saved, 2);
    ::close(saved);
  }
};

// A training thread that runs steps until destroyed; started once it has run 20 (warm).
struct Trainer {
  explicit Trainer(Model& m)
      : thread([this, &m] {
          while (!stop) {
            m.step();
            steps++;
          }
        }) {
    wait_until([&] { return steps > 20; });
  }
  ~Trainer() {
    stop = true;
    thread.join();
  }
  std::atomic<bool> stop{false};
  std::atomic<long> steps{0};
  std::thread thread;
};

void handle(int signo, void (*fn)(int)) {
  struct sigaction sa {};
  sa.sa_handler = fn;
  sigemptyset(&sa.sa_mask);
  sigaction(signo, &sa, nullptr);
}

// Pause latency: the training thread runs steps; at random moments the main thread sends the
// pause signal to the process; latency ends when the trainer blocks in the gate.
void latency(Model& m, int pauses) {
  hydro::Settings s;
  hydro::Runtime rt(s);
  auto& gate = hydro::PauseGate::instance();
  std::vector<double> pause_us, resume_us;
  std::mt19937 rng(2);
  {
    Trainer trainer(m);
    QuietStderr quiet;
    for (int i = 0; i < pauses; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 3000));
      int64_t t = now_ns();
      ::kill(::getpid(), SIGUSR1);
      wait_until([&] { return gate.threads_waiting() == 1; });
      pause_us.push_back((gate.last_block_ns() - t) / 1e3);
      t = now_ns();
      ::kill(::getpid(), SIGUSR2);
      wait_until([&] { return gate.threads_waiting() == 0; });
      resume_us.push_back((gate.last_release_ns() - t) / 1e3);
    }
  }
  std::printf(
      "%s  signal -> paused at an operator: p50 %.0f us, p99 %.0f us | resume: p50 %.0f us, p99 %.0f us "
      "(%d pauses)\n",
      m.name, pct(pause_us, .5), pct(pause_us, .99), pct(resume_us, .5), pct(resume_us, .99), pauses);
}

// The same, for a pause checked only at step boundaries (what submitit and Lightning do): the
// signal handler sets a flag that the loop reads after each step.
std::atomic<bool> g_flag{false};
void on_flag(int) { g_flag = true; }
void boundary_latency(Model& m, int pauses) {
  handle(SIGURG, on_flag);
  std::atomic<bool> stop{false}, waiting{false}, release{false};
  std::atomic<int64_t> seen_ns{0};
  std::thread trainer([&] {
    while (!stop) {
      m.step();
      if (g_flag) {
        seen_ns = now_ns();
        waiting = true;
        while (!release) std::this_thread::sleep_for(std::chrono::microseconds(20));
        release = false;
        g_flag = false;
        waiting = false;
      }
    }
  });
  std::vector<double> us;
  std::mt19937 rng(3);
  for (int i = 0; i < pauses; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 3000));
    int64_t t = now_ns();
    ::kill(::getpid(), SIGURG);
    wait_until([&] { return waiting.load(); });
    us.push_back((seen_ns - t) / 1e3);
    release = true;
    wait_until([&] { return !waiting.load(); });
  }
  stop = true;
  trainer.join();
  signal(SIGURG, SIG_DFL);
  std::printf("%s  step-boundary-only pause: p50 %.0f us, p99 %.0f us\n", m.name, pct(us, .5), pct(us, .99));
}

// The floor: a signal sent to a thread blocked in pause(), until its handler has run.
std::atomic<int64_t> g_handled_ns{0};
void on_usr(int) { g_handled_ns = now_ns(); }
void delivery_floor(int n) {
  handle(SIGURG, on_usr);
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    while (!stop) ::pause();
  });
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    g_handled_ns = 0;
    int64_t t = now_ns();
    ::pthread_kill(waiter.native_handle(), SIGURG);
    wait_until([&] { return g_handled_ns.load() != 0; });
    us.push_back((g_handled_ns - t) / 1e3);
  }
  stop = true;
  ::pthread_kill(waiter.native_handle(), SIGURG);
  waiter.join();
  signal(SIGURG, SIG_DFL);
  std::printf("signal delivery floor on this machine: p50 %.0f us, p99 %.0f us\n", pct(us, .5), pct(us, .99));
}

// The floor of any pause at an operator boundary: a callback registered all along (what hydro
// avoids: it costs every step) notes the first operator that starts after the signal's handler
// has run. hydro's pause is this plus arming its callback from the watcher thread.
std::atomic<bool> g_want{false};
std::atomic<int64_t> g_seen_ns{0};
void on_want(int) { g_want = true; }
void operator_floor(Model& m, int pauses) {
  handle(SIGURG, on_want);
  auto h = at::addGlobalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
        if (g_want.load(std::memory_order_relaxed) && g_want.exchange(false)) g_seen_ns = now_ns();
        return nullptr;
      }).needsInputs(false));
  std::vector<double> us;
  std::mt19937 rng(4);
  {
    Trainer trainer(m);
    for (int i = 0; i < pauses; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 3000));
      g_seen_ns = 0;
      int64_t t = now_ns();
      ::kill(::getpid(), SIGURG);
      wait_until([&] { return g_seen_ns.load() != 0; });
      us.push_back((g_seen_ns - t) / 1e3);
    }
  }
  at::removeCallback(h);
  signal(SIGURG, SIG_DFL);
  std::printf("%s  floor of any operator-boundary pause (signal -> next operator starts): p50 %.0f us, p99 %.0f us\n",
              m.name, pct(us, .5), pct(us, .99));
}

// The longest single operator of a step: the most a pause at an operator can wait.
double longest_op_us(Model& m) {
  static std::atomic<int64_t> start{0}, longest{0};
  auto h = at::addGlobalCallback(at::RecordFunctionCallback(
                                     [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
                                       start = now_ns();
                                       return nullptr;
                                     },
                                     [](const at::RecordFunction&, at::ObserverContext*) {
                                       int64_t d = now_ns() - start;
                                       if (d > longest) longest = d;
                                     })
                                     .needsInputs(false));
  for (int i = 0; i < 50; ++i) m.step();
  at::removeCallback(h);
  return longest / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  hydro_bench::exit_on_options(argc, argv,
                               "usage: hydro-bench-pause [BLOCKS] [PAUSES]\n  step overhead, pause and resume latency "
                               "at operators (default BLOCKS 30, PAUSES 1000)");
  int blocks = argc > 1 ? std::atoi(argv[1]) : 30;
  int pauses = argc > 2 ? std::atoi(argv[2]) : 1000;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  torch::set_num_threads(1);
  // One BLAS thread too: OpenBLAS's own pool ignores torch::set_num_threads.
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
  torch::manual_seed(0);
  Model a("A 64-256-256-10 b64", {64, 256, 256, 10}, 64);
  Model b("B 64-64-10 b16     ", {64, 64, 10}, 16);
  overhead(a, blocks, 200);
  overhead(b, blocks, 500);
  delivery_floor(pauses);
  std::printf("longest single operator: A %.0f us, B %.0f us (leaf ops; nested autograd ops span several)\n",
              longest_op_us(a), longest_op_us(b));
  operator_floor(a, pauses);
  latency(a, pauses);
  operator_floor(b, pauses);
  latency(b, pauses);
  boundary_latency(a, pauses);
  boundary_latency(b, pauses);
  return 0;
}
