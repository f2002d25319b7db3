// One job at a time on one thread, kept from the first job to the destructor: what a checkpoint
// leaves to run behind training (the async write, the pruning of old checkpoints). Starting a
// thread per job cost the training thread about 100 µs a checkpoint on a VM; handing a job to a
// waiting thread costs a lock and a wake-up.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <memory>
#include <thread>

#include <sys/types.h>

namespace hydro {

class BackgroundJob {
 public:
  BackgroundJob() = default;
  // Waits for the job in flight, then ends the thread. In a child forked meanwhile, which has no
  // such thread, it leaves both alone.
  ~BackgroundJob();
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  // Waits for the job in flight, then runs `job` on the thread. A job reports its own errors; a
  // std::exception escaping it is logged. Throws std::system_error when the thread cannot start.
  void start(std::function<void()> job);
  // Returns once no job is in flight. In a child forked meanwhile it returns at once: the job in
  // flight is the parent's, and nothing of it runs there.
  void wait();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;  // the next job, until the thread takes it
  bool busy_ = false;          // a job is given and not done
  bool stop_ = false;
  std::unique_ptr<std::thread> thread_;
  std::atomic<pid_t> owner_{0};  // the process that started the thread
};

}  // namespace hydro
