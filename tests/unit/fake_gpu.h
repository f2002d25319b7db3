// The fake device of the GPU release's units (hydro/gpu_release.h): the driver's calls recorded,
// the one named failing. gpu_release_test.cpp and gpu_release_own_test.cpp share it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "hydro/gpu_release.h"

namespace hydro {

using std::chrono::milliseconds;
using Calls = std::vector<std::string>;
inline constexpr uint64_t kGiB = 1ull << 30;

// A process with `device` bytes on the GPU and `host` bytes of host memory free; the call named
// `fail` (and any in `also_fail`) returns an error.
struct FakeGpu {
  uint64_t device = 4 * kGiB, host = 64 * kGiB;
  std::string fail;
  std::vector<std::string> also_fail;
  Calls calls;
  std::vector<std::string> logs;
  std::chrono::steady_clock::time_point clock;  // moved on by each checkpoint's `checkpoint_takes`
  milliseconds checkpoint_takes{0};
  milliseconds lock_timeout{0};  // the last lock's

  std::function<Status()> call(const std::string& name) {
    return [this, name] {
      calls.push_back(name);
      bool fails = name == fail;
      for (const auto& f : also_fail) fails = fails || name == f;
      return fails ? Status::io(name + " refused") : Status::OK();
    };
  }
  DeviceCalls device_calls() {
    DeviceCalls c;
    c.device_bytes = [this] { return device; };
    c.host_available = [this] { return HostRoom{host, "MemAvailable in /proc/meminfo"}; };
    c.release_cache = call("release_cache");
    c.suspend_collectives = call("suspend_collectives");
    c.resume_collectives = call("resume_collectives");
    auto lock = call("lock");
    c.lock = [this, lock](milliseconds timeout) {
      lock_timeout = timeout;
      return lock();
    };
    auto checkpoint = call("checkpoint");
    c.checkpoint = [this, checkpoint] {
      clock += checkpoint_takes;
      return checkpoint();
    };
    c.now = [this] { return clock; };
    c.restore = call("restore");
    c.unlock = call("unlock");
    return c;
  }
  GpuReleaser releaser(GpuRelease mode) {
    return GpuReleaser(mode, device_calls(), [this](const std::string& line) { logs.push_back(line); });
  }
  bool logged(const std::string& part) const {
    for (const auto& l : logs)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
};

}  // namespace hydro
