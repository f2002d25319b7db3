#include "hydro/background_job.h"

#include <unistd.h>

#include <exception>
#include <string>
#include <utility>

#include "hydro/log.h"

namespace hydro {

BackgroundJob::~BackgroundJob() {
  if (!thread_) return;
  if (::getpid() != owner_) {
    (void)thread_.release();  // a forked child: the thread and its job exist in the parent only
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_->join();
}

void BackgroundJob::start(std::function<void()> job) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
    if (!thread_) {  // first, so that a failure to start it (it throws) leaves nothing in flight
      thread_ = std::make_unique<std::thread>([this] { run(); });
      owner_ = ::getpid();
    }
    job_ = std::move(job);
    busy_ = true;
  }
  cv_.notify_all();
}

void BackgroundJob::wait() {
  const pid_t owner = owner_.load();
  if (owner != 0 && owner != ::getpid()) return;  // before the lock, which the parent's thread may hold
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !busy_; });
}

void BackgroundJob::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return job_ || stop_; });
    if (!job_) return;  // stopped, and nothing was given
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {  // a job reports its own errors; this is a last resort
      log(std::string("error: a background job failed: ") + e.what());
    }
    job = nullptr;  // what the job held goes before wait() returns
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace hydro
