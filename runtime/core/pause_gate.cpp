#include "hydro/pause_gate.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace hydro {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t val) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word layout");
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, nullptr, nullptr, 0);
}

// Handler state: plain arrays, read by handlers without locks.
std::atomic<int> g_action[NSIG];    // Action + 1; 0 = not ours
struct sigaction g_previous[NSIG];  // written only before ours is installed
// Set by ignore_from_now_on: the handler chains to nothing from then on, and stop() leaves the
// signal ignored. A flag, not a write of g_previous: a handler running on another thread at that
// moment would read a torn sigaction (a flag of the old one, a function of the new).
std::atomic<bool> g_chain_off[NSIG];
int g_pipe[2] = {-1, -1};
std::thread* g_watcher = nullptr;
std::mutex g_lifecycle;
// The process that installed the handlers. A child forked from it without exec (a DataLoader
// worker) inherits the handlers but is not what hydro serves: there they ignore the signal, so a
// worker that Slurm signals with the rest of the step neither dies under the parent's loop nor
// writes into the parent's pipe. exec() resets them to the default.
std::atomic<pid_t> g_owner{0};
// One of our handlers at a time, on any thread. sa_mask keeps them from nesting on one thread,
// but the kernel may run a pause's handler on one thread and a resume's on another at once: a
// resume between the pause's note and its request would be overwritten by the pause, and lost.
std::atomic_flag g_handling = ATOMIC_FLAG_INIT;
// Test hook (HYDRO_TEST_PAUSE_HANDLER_DELAY_US, read at start()): a pause's handler sleeps this
// long between its note and its request, so a test can land a resume there.
long g_test_pause_delay_ns = 0;
// Test hook (HYDRO_TEST_WATCHER_DELAY_MS, read at start()): the watcher sleeps this long before it
// passes a pause signal on, so a test can see the training thread arm the pause itself.
long g_test_watcher_delay_ms = 0;
// drain(): the signal bytes the handlers are writing or wrote into the pipe (counted before their
// request, so that a thread that sees the request also sees the count), and those the watcher has
// passed on to its listener.
std::atomic<uint64_t> g_sent{0};
std::atomic<uint64_t> g_passed{0};
thread_local bool t_watcher = false;

// A handler installed before ours (never SIG_DFL: that would stop or kill us).
void chain_to_previous(int signo, siginfo_t* info, void* ucontext) {
  const struct sigaction& prev = g_previous[signo];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(signo, info, ucontext);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler) {
    prev.sa_handler(signo);
  }
}

struct sigaction ignored() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  return ignore;
}

void handler(int signo, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  if (::getpid() != g_owner.load(std::memory_order_relaxed)) return;
  const int a = g_action[signo].load(std::memory_order_relaxed) - 1;
  PauseGate& gate = PauseGate::instance();
  while (g_handling.test_and_set(std::memory_order_acquire)) ::sched_yield();  // another thread's handler
  if (g_pipe[1] >= 0) g_sent.fetch_add(1, std::memory_order_acq_rel);
  if (a == static_cast<int>(Action::pause)) {
    gate.note_pause_signal(signo);
    if (g_test_pause_delay_ns > 0) {
      struct timespec ts {
        g_test_pause_delay_ns / 1000000000, g_test_pause_delay_ns % 1000000000
      };
      ::nanosleep(&ts, nullptr);
    }
    gate.request_pause();
  } else if (a == static_cast<int>(Action::resume))
    gate.request_resume();
  else if (a == static_cast<int>(Action::checkpoint_exit))
    gate.request_exit();
  else if (a == static_cast<int>(Action::checkpoint))
    gate.request_checkpoint();
  if (g_pipe[1] >= 0) {
    unsigned char b = static_cast<unsigned char>(signo);
    // A full pipe: the watcher is behind, and the request stands; only its line is lost.
    if (::write(g_pipe[1], &b, 1) != 1) g_sent.fetch_sub(1, std::memory_order_acq_rel);
  }
  g_handling.clear(std::memory_order_release);
  if (!g_chain_off[signo].load(std::memory_order_acquire)) chain_to_previous(signo, info, ucontext);
  errno = saved_errno;
}

bool is_ours(const struct sigaction& sa) { return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction == handler; }

// hydro's handler for one of `ours`: the others blocked while it runs.
struct sigaction our_action(const sigset_t& ours) {
  struct sigaction sa {};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sa.sa_mask = ours;
  return sa;
}

void watch(SignalBridge::Listener listener) {
  t_watcher = true;
  for (;;) {
    unsigned char buf[64];
    ssize_t n = ::read(g_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == 0) return;  // stop()
      int signo = buf[i];
      int a = g_action[signo].load(std::memory_order_relaxed) - 1;
      if (a == static_cast<int>(Action::pause) && g_test_watcher_delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(g_test_watcher_delay_ms));
      if (a >= 0 && listener) listener(signo, static_cast<Action>(a));
      g_passed.fetch_add(1, std::memory_order_acq_rel);
    }
  }
}

// In a forked child: no watcher thread (fork copies only the caller), no pause inherited from the
// parent (the child's operators must not block on a release that only the parent would get), and
// the parent's wakeup pipe is the parent's.
void after_fork_in_child() {
  g_handling.clear();  // a parent's thread may have been inside a handler at the fork
  PauseGate::instance().forget();
  if (g_pipe[0] >= 0) ::close(g_pipe[0]);
  if (g_pipe[1] >= 0) ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
  g_watcher = nullptr;  // the parent's thread object: never joined here
}

}  // namespace

PauseGate& PauseGate::instance() {
  static PauseGate gate;
  return gate;
}

void PauseGate::request_pause() noexcept { word_.fetch_or(1u, std::memory_order_acq_rel); }

void PauseGate::request_resume() noexcept {
  uint32_t old = word_.load(std::memory_order_relaxed);
  while (!word_.compare_exchange_weak(old, (old & ~1u) + 2u, std::memory_order_acq_rel)) {
  }
  futex(&word_, FUTEX_WAKE_PRIVATE, INT_MAX);
}

void PauseGate::request_exit() noexcept {
  exit_.store(true, std::memory_order_release);
  request_resume();
}

void PauseGate::wait_while_paused(const std::function<void()>& on_blocked) noexcept {
  uint32_t v = word_.load(std::memory_order_acquire);
  if (!(v & 1u)) return;
  blocked_ns_.store(now_ns(), std::memory_order_release);
  waiting_.fetch_add(1, std::memory_order_acq_rel);
  if (on_blocked) {
    try {
      on_blocked();
    } catch (...) {
    }
  }
  v = word_.load(std::memory_order_acquire);  // a resume during on_blocked: no futex call
  while (v & 1u) {
    futex(&word_, FUTEX_WAIT_PRIVATE, v);  // returns at once if the word changed since the load
    v = word_.load(std::memory_order_acquire);
  }
  released_ns_.store(now_ns(), std::memory_order_release);
  waiting_.fetch_sub(1, std::memory_order_acq_rel);
}

void PauseGate::clear_requests() noexcept {
  exit_.store(false);
  checkpoint_.store(false);
}

void PauseGate::forget() noexcept {
  clear_requests();
  word_.store(0, std::memory_order_release);
  waiting_.store(0, std::memory_order_release);
}

void PauseGate::reset_for_test() noexcept {
  clear_requests();
  request_resume();
  note_pause_signal(0);
}

Status SignalBridge::start(const SignalMap& map, Listener listener) {
  std::lock_guard<std::mutex> lock(g_lifecycle);
  if (g_watcher) return Status::invalid_argument("hydro signal handlers are already installed");
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { ::pthread_atfork(nullptr, nullptr, after_fork_in_child); });
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe for the signal watcher");
  g_owner.store(::getpid());
  const char* delay = std::getenv("HYDRO_TEST_PAUSE_HANDLER_DELAY_US");
  g_test_pause_delay_ns = delay ? std::atol(delay) * 1000L : 0;
  const char* watcher_delay = std::getenv("HYDRO_TEST_WATCHER_DELAY_MS");
  g_test_watcher_delay_ms = watcher_delay ? std::atol(watcher_delay) : 0;
  ::fcntl(g_pipe[1], F_SETFL, O_NONBLOCK);
  // While one of our handlers runs, the others wait: a resume that landed inside a pause's
  // handler (between its note and its request) would otherwise be overwritten by it, and lost.
  sigset_t ours;
  sigemptyset(&ours);
  for (const auto& entry : map.entries()) sigaddset(&ours, entry.first);
  for (const auto& [signo, action] : map.entries()) {
    // What was there goes to g_previous before ours is in, for ours to chain to. Ours already
    // (inherited by a forked child that now starts its own): chain to what came before it, never
    // to ourselves.
    struct sigaction previous {};
    if (::sigaction(signo, nullptr, &previous) == 0 && !is_ours(previous)) g_previous[signo] = previous;
    g_chain_off[signo].store(false);
    g_action[signo].store(static_cast<int>(action) + 1);
    const struct sigaction sa = our_action(ours);
    if (::sigaction(signo, &sa, nullptr) != 0) {
      Status s = Status::from_errno(errno, "sigaction " + signal_name(signo));
      g_action[signo].store(0);
      return s;
    }
  }
  g_watcher = new std::thread(watch, std::move(listener));
  // A --hydro-pause=on job starts its processes with these blocked (SignalMap::
  // blocked_until_handled): with our handlers in, let them through, and any that came early with.
  ::pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
  return Status::OK();
}

void SignalBridge::ignore_from_now_on(int signo) {
  if (signo <= 0 || signo >= NSIG) return;
  std::lock_guard<std::mutex> lock(g_lifecycle);
  if (g_watcher && g_action[signo].load() != 0) {
    g_chain_off[signo].store(true, std::memory_order_release);  // ours stays in until stop()
  } else {
    const struct sigaction ignore = ignored();
    ::sigaction(signo, &ignore, nullptr);
  }
}

std::vector<int> SignalBridge::reclaim() {
  std::lock_guard<std::mutex> lock(g_lifecycle);
  std::vector<int> taken;
  if (!g_watcher) return taken;
  sigset_t ours;
  sigemptyset(&ours);
  for (int signo = 1; signo < NSIG; ++signo)
    if (g_action[signo].load() != 0) sigaddset(&ours, signo);
  const struct sigaction sa = our_action(ours);
  for (int signo = 1; signo < NSIG; ++signo) {
    struct sigaction now {};
    if (g_action[signo].load() == 0 || ::sigaction(signo, nullptr, &now) != 0 || is_ours(now)) continue;
    if (::sigaction(signo, &sa, nullptr) == 0) taken.push_back(signo);
  }
  return taken;
}

void SignalBridge::drain() {
  if (t_watcher) return;
  const uint64_t sent = g_sent.load(std::memory_order_acquire);
  // A bound for a watcher that cannot run at all (its listener blocked); it answers in
  // microseconds otherwise.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (g_passed.load(std::memory_order_acquire) < std::min(sent, g_sent.load(std::memory_order_acquire)) &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

bool SignalBridge::running() {
  std::lock_guard<std::mutex> lock(g_lifecycle);
  return g_watcher != nullptr;
}

void SignalBridge::stop() {
  std::lock_guard<std::mutex> lock(g_lifecycle);
  if (!g_watcher) return;
  for (int signo = 1; signo < NSIG; ++signo) {
    if (g_action[signo].load() == 0) continue;
    const struct sigaction ignore = ignored();
    ::sigaction(signo, g_chain_off[signo].load() ? &ignore : &g_previous[signo], nullptr);
    g_action[signo].store(0);
  }
  // Blocking for this one byte: a full pipe only means the watcher is behind, and it drains it.
  ::fcntl(g_pipe[1], F_SETFL, 0);
  unsigned char stop = 0;
  while (::write(g_pipe[1], &stop, 1) < 0 && errno == EINTR) {
  }
  g_watcher->join();
  delete g_watcher;
  g_watcher = nullptr;
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

}  // namespace hydro
