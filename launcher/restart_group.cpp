#include "restart_group.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "hydro/hang_watch.h"
#include "hydro/log.h"

namespace hydro::launcher {
namespace {

constexpr std::chrono::milliseconds kWatchSlice{500};  // how soon the watcher sees a stop
constexpr std::chrono::milliseconds kConnectSlice{1000};

std::string key(const char* what, int generation) {
  return std::string("hydro-launch/") + what + "/" + std::to_string(generation);
}

}  // namespace

Status RestartGroup::open(const DistEnv& env, std::chrono::milliseconds timeout, std::unique_ptr<RestartGroup>* out) {
  // The group's threads (the watcher, task 0's server) take no signal: hydro-launch reads its own,
  // SIGCHLD too, from a signalfd, and one delivered to a thread that does not block it is lost.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  Status st = start(env, timeout, out);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return st;
}

Status RestartGroup::start(const DistEnv& env, std::chrono::milliseconds timeout, std::unique_ptr<RestartGroup>* out) {
  std::unique_ptr<RestartGroup> g(new RestartGroup(env, timeout));
  if (g->event_fd_ < 0) return Status::from_errno(errno, "eventfd");
  if (env.rank == 0) {
    Status st = TcpStoreServer::start(env.restart_group_port(), store_scope_from_env(), &g->server_);
    if (!st.ok())
      return Status::io(st.message() + " (the restart group's store: MASTER_PORT + 2 = " +
                        std::to_string(env.restart_group_port()) + ")");
  }
  g->thread_ = std::thread([p = g.get()] { p->watch_calls(); });
  *out = std::move(g);
  return Status::OK();
}

RestartGroup::RestartGroup(const DistEnv& env, std::chrono::milliseconds timeout)
    : env_(env), timeout_(timeout), event_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

RestartGroup::~RestartGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  main_.reset();
  watcher_.reset();
  server_.reset();
  if (event_fd_ >= 0) ::close(event_fd_);
}

// Under mu_: empties fd() of a call already delivered.
void RestartGroup::drain() {
  uint64_t n = 0;
  while (::read(event_fd_, &n, sizeof n) < 0 && errno == EINTR) {
  }
}

void RestartGroup::watch(int generation) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    watched_ = generation;
    drain();  // this task followed or made the call before: no stale signal for the next generation
  }
  cv_.notify_all();
}

std::string RestartGroup::read_call() {
  std::lock_guard<std::mutex> lock(mu_);
  drain();
  return call_;
}

Status RestartGroup::client(RankStore** out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !connecting_; });
  if (!connected_.ok()) return connected_;
  *out = main_.get();
  return Status::OK();
}

bool RestartGroup::called(int generation, std::string* reason) {
  RankStore* c = nullptr;
  return client(&c).ok() && c->get(key("call", generation), std::chrono::milliseconds(0), reason).ok();
}

Status RestartGroup::call(int generation, const std::string& reason, std::string* standing) {
  RankStore* c = nullptr;
  HYDRO_RETURN_IF_ERROR(client(&c));
  int64_t callers = 0;
  HYDRO_RETURN_IF_ERROR(c->add(key("callers", generation), 1, &callers));
  if (callers > 1) return c->get(key("call", generation), timeout_, standing);
  *standing = "rank " + std::to_string(env_.rank) + ": " + reason;
  return c->set(key("call", generation), *standing);
}

Status RestartGroup::arrive(int generation, std::chrono::milliseconds timeout) {
  RankStore* c = nullptr;
  HYDRO_RETURN_IF_ERROR(client(&c));
  int64_t arrived = 0;
  HYDRO_RETURN_IF_ERROR(c->add(key("arrived", generation), 1, &arrived));
  if (arrived == env_.world_size) HYDRO_RETURN_IF_ERROR(c->set(key("all-arrived", generation), "1"));
  std::string ignored;
  Status st = c->get(key("all-arrived", generation), timeout, &ignored);
  if (st.code() == Code::not_found)
    return Status::not_found("only " + std::to_string(arrived) + " of " + std::to_string(env_.world_size) +
                             " tasks had arrived within " + std::to_string(timeout.count() / 1000) + " s");
  return st;
}

RestartGroup::Finish RestartGroup::finish(int generation, std::chrono::milliseconds timeout, std::string* reason) {
  RankStore* c = nullptr;
  int64_t ended = 0;
  if (!client(&c).ok() || !c->add(key("ended-well", generation), 1, &ended).ok()) return Finish::store_gone;
  if (ended == env_.world_size)
    return c->set(key("all-ended-well", generation), "1").ok() ? Finish::all_ended : Finish::store_gone;
  RunningDeadline deadline(timeout, kWatchSlice);
  std::string ignored;
  do {
    Status st = c->get(key("all-ended-well", generation), kWatchSlice, &ignored);
    if (st.ok()) return Finish::all_ended;
    if (st.code() != Code::not_found) return Finish::store_gone;
    if (called(generation, reason)) return Finish::called;
  } while (!deadline.passed());
  return Finish::timed_out;
}

// Connects both clients (retrying in slices, so that a stop is seen), then waits for each watched
// generation's call and signals fd().
void RestartGroup::watch_calls() {
  RunningDeadline deadline(timeout_, kConnectSlice);
  Status st = Status::io("stopped before connecting");
  for (std::unique_ptr<RankStore>* c : {&main_, &watcher_}) {
    do {
      st = connect_tcp_store(env_.master_addr, env_.restart_group_port(), store_scope_from_env(), kConnectSlice, c);
    } while (!st.ok() && !stop_ && !deadline.passed());
    if (!st.ok()) break;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected_ = st.ok() ? st
                         : Status::io(st.message() + " (the restart group's store at " + env_.master_addr + ":" +
                                      std::to_string(env_.restart_group_port()) + ")");
    connecting_ = false;
  }
  cv_.notify_all();
  if (!st.ok()) return;
  int delivered = 0;
  for (;;) {
    int generation = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || watched_ > delivered; });
      if (stop_) return;
      generation = watched_;
    }
    std::string reason;
    st = watcher_->get(key("call", generation), kWatchSlice, &reason);
    if (st.code() == Code::not_found) continue;
    if (!st.ok()) return;  // the group's store is gone: task 0's hydro-launch has ended
    std::lock_guard<std::mutex> lock(mu_);
    if (watched_ != generation) continue;
    call_ = reason;
    delivered = generation;
    uint64_t one = 1;
    while (::write(event_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace hydro::launcher
