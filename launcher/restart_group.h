// In-job restart of several tasks (hydro-launch --restarts N in a step of several tasks): every
// task's program restarts together, as one new generation.
//
// The hydro-launch of every task of a step meets in a store of their own: task 0's serves it at
// MASTER_ADDR:MASTER_PORT + 2, authenticated with MUNGE like the ranks' store (hydro/tcp_store.h:
// the same uid and job step only). A task whose program failed, and which may restart it, calls
// the next generation; every task watches for that call, kills its own program (hung in a
// collective, or still training) and arrives; once every task has arrived, each starts its program
// again from the newest checkpoint. Nothing of the failed generation is alive by then, so the new
// one meets on the same ports, and a task whose peers restart never waits out a timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "hydro/dist_env.h"
#include "hydro/rank_store.h"
#include "hydro/status.h"
#include "hydro/tcp_store.h"

namespace hydro::launcher {

class RestartGroup {
 public:
  // Task 0 starts the server now; every task's connection is made in the background (task 0 may
  // start later), within `timeout`.
  static Status open(const DistEnv& env, std::chrono::milliseconds timeout, std::unique_ptr<RestartGroup>* out);
  ~RestartGroup();  // stops watching; task 0's server goes with it
  RestartGroup(const RestartGroup&) = delete;
  RestartGroup& operator=(const RestartGroup&) = delete;

  // Readable once the generation being watched has been called (then read_call()).
  int fd() const { return event_fd_; }
  // Watches for the call of `generation` (1, 2, ...).
  void watch(int generation);
  // After fd() was readable: the call's reason ("rank R: why"), and resets fd().
  std::string read_call();

  // Whether `generation` has been called; *reason: the call's ("rank R: why").
  bool called(int generation, std::string* reason);
  // Calls `generation` for `reason`. Two tasks may call at once: the first call stands, and
  // *standing is its reason.
  Status call(int generation, const std::string& reason, std::string* standing);
  // This task's program of the generation before has ended: waits until every task's has.
  Status arrive(int generation, std::chrono::milliseconds timeout);
  // This task's program of the generation before `generation` ended well: waits until every
  // task's has (all_ended), or until a task calls `generation` because its program failed after
  // all (called; *reason: the call's), within `timeout` (timed_out). store_gone: task 0's
  // hydro-launch has ended, which it does once every task's program has.
  enum class Finish { all_ended, called, timed_out, store_gone };
  Finish finish(int generation, std::chrono::milliseconds timeout, std::string* reason);

 private:
  RestartGroup(const DistEnv& env, std::chrono::milliseconds timeout);
  static Status start(const DistEnv& env, std::chrono::milliseconds timeout, std::unique_ptr<RestartGroup>* out);
  Status client(RankStore** out);  // the main thread's connection, once made
  void watch_calls();              // the watcher thread
  void drain();

  const DistEnv env_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<RankStore> main_, watcher_;  // one connection a thread
  Status connected_;
  int event_fd_ = -1;

  std::mutex mu_;
  std::condition_variable cv_;
  bool connecting_ = true;
  std::atomic<bool> stop_{false};
  int watched_ = 0;  // 0: none
  std::string call_;
  std::thread thread_;
};

}  // namespace hydro::launcher
