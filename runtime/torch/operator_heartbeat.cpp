#include "operator_heartbeat.h"

#include <ATen/record_function.h>

#include <atomic>
#include <exception>
#include <thread>

#include "hydro/log.h"

namespace hydro {
namespace {

std::atomic<bool> g_started{false};

std::unique_ptr<at::ObserverContext> on_operator_start(const at::RecordFunction&) {
  if (!g_started.load(std::memory_order_relaxed)) g_started.store(true, std::memory_order_relaxed);
  return nullptr;
}

}  // namespace

bool OperatorHeartbeat::working(std::chrono::milliseconds within) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (refused_) return false;
  g_started.store(false, std::memory_order_relaxed);
  at::CallbackHandle handle = 0;
  try {
    handle = at::addGlobalCallback(at::RecordFunctionCallback(on_operator_start).needsInputs(false));
  } catch (const std::exception& e) {
    refused_ = true;
    log(std::string("warning: the hang watch cannot see operators, only steps' ends: ") + e.what());
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + within;
  bool started = false;
  while (!(started = g_started.load(std::memory_order_relaxed)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  at::removeCallback(handle);
  return started;
}

}  // namespace hydro
