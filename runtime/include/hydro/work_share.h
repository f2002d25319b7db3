// Work that the calling thread must see done before it goes on, shared with one helper thread:
// an async checkpoint's copies of the training state. The helper takes tasks as they are added,
// while the caller does other work (pickling the structure); finish() then runs what is left on
// the caller and waits for the helper's task. Where no CPU is free for the helper, the caller
// does all of it: never slower than doing it alone, but for a lock per task.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <sys/types.h>

namespace hydro {

class WorkShare {
 public:
  WorkShare() = default;
  // Runs what is queued, then ends the helper. In a child forked meanwhile, which has no helper,
  // leaves it alone.
  ~WorkShare();
  WorkShare(const WorkShare&) = delete;
  WorkShare& operator=(const WorkShare&) = delete;

  // Queues `task`; the helper starts at the first. Where it cannot start, the tasks wait for
  // finish(). In a child forked after the helper started, it runs `task` at once and touches no
  // lock: the parent's helper may have held one at the fork, and this process has no thread to
  // release it.
  void add(std::function<void()> task);
  // Returns once every task added is done, run here or by the helper. Rethrows the first exception
  // a task threw since the last finish() (the other tasks still run).
  void finish();

 private:
  void help();
  void start_helper_locked();
  bool helper_usable() const;
  bool forked_child() const;  // a helper started in the parent, not in this process
  // Pops and runs tasks until none is queued; `lock` is held on entry and on return.
  void run_queued(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  int running_ = 0;  // tasks taken and not done
  std::exception_ptr error_;
  bool stop_ = false;
  bool no_helper_ = false;  // its thread could not start
  std::unique_ptr<std::thread> helper_;
  pid_t owner_ = 0;                 // the process that started the helper
  std::exception_ptr child_error_;  // in a forked child: the first a task threw
};

}  // namespace hydro
