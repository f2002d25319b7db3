#include "hydro/work_share.h"

#include <unistd.h>

#include <system_error>
#include <utility>

namespace hydro {

WorkShare::~WorkShare() {
  if (forked_child()) {
    (void)helper_.release();  // the helper exists in the parent only
    return;
  }
  try {
    finish();
  } catch (...) {  // nobody is left to hear it
  }
  if (!helper_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  helper_->join();
}

bool WorkShare::helper_usable() const { return helper_ && ::getpid() == owner_; }

bool WorkShare::forked_child() const { return helper_ && ::getpid() != owner_; }

void WorkShare::start_helper_locked() {
  if (helper_ || no_helper_) return;
  try {
    helper_ = std::make_unique<std::thread>([this] { help(); });
    owner_ = ::getpid();
  } catch (const std::system_error&) {
    no_helper_ = true;  // finish() runs it all
  }
}

void WorkShare::add(std::function<void()> task) {
  if (forked_child()) {
    try {
      task();
    } catch (...) {
      if (!child_error_) child_error_ = std::current_exception();
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    start_helper_locked();
  }
  if (helper_usable()) cv_.notify_one();
}

void WorkShare::run_queued(std::unique_lock<std::mutex>& lock) {
  while (!queue_.empty()) {
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    std::exception_ptr failed;
    try {
      task();
    } catch (...) {
      failed = std::current_exception();
    }
    task = nullptr;  // what it held goes before finish() returns
    lock.lock();
    if (failed && !error_) error_ = failed;
    --running_;
  }
}

void WorkShare::finish() {
  if (forked_child()) {  // add() ran them all
    if (std::exception_ptr e = std::exchange(child_error_, nullptr)) std::rethrow_exception(e);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  run_queued(lock);
  if (helper_usable()) cv_.wait(lock, [this] { return running_ == 0; });
  if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
}

void WorkShare::help() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_ && queue_.empty()) return;
    run_queued(lock);
    cv_.notify_all();  // finish() may be waiting for running_ to reach 0
  }
}

}  // namespace hydro
