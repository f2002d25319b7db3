// Issue 58: the host side of a checkpoint of device tensors (hydro/staging.h), over a CPU stand-in
// for the copy stream: copies are queued, and run in order only when a wait asks for one (as a
// stream's event is waited for). So a test sees that a save's copies were all queued before any
// was waited for. The CUDA calls run on a GPU machine only (scripts/gpu-check); the torch side
// over a stand-in is tests/unit/device_copies_test.cpp.
#include "hydro/staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace hydro {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// A stream whose queued copies run, in order, when waited for.
struct StandInStream {
  std::vector<std::string> calls, logs;
  std::string fail;  // "pin", "queue" or "wait": fails for copy `fail_copy` (pin: always)
  size_t fail_copy = 0;
  uint64_t host = 64 * kGiB;
  std::vector<uint64_t> unpinned;

  StagingCalls calls_for() {
    StagingCalls c;
    c.pin = [this](uint64_t bytes, void** host_memory) {
      calls.push_back("pin " + std::to_string(bytes));
      if (fail == "pin") return Status::io("cudaHostAlloc: out of memory");
      *host_memory = new char[bytes];
      return Status::OK();
    };
    c.unpin = [this](void* host_memory, uint64_t bytes) {
      unpinned.push_back(bytes);
      delete[] static_cast<char*>(host_memory);
    };
    c.host_available = [this] { return HostRoom{host, "memory.max of /slurm/job_1"}; };
    c.queue = [this](size_t copy) {
      calls.push_back("queue " + std::to_string(copy));
      if (fail == "queue" && copy == fail_copy) return Status::io("cudaMemcpyAsync: invalid argument");
      return Status::OK();
    };
    c.wait = [this](size_t copy) {
      calls.push_back("wait " + std::to_string(copy));
      if (fail == "wait" && copy == fail_copy) return Status::io("cudaEventSynchronize: an illegal memory access");
      return Status::OK();
    };
    return c;
  }
  Staging staging() {
    return Staging(calls_for(), [this](const std::string& line) { logs.push_back(line); });
  }
};

using Calls = std::vector<std::string>;

TEST(Staging, EveryCopyOfASaveIsQueuedBeforeAnyIsWaitedForInOrder) {
  StandInStream d;
  Staging s = d.staging();
  for (int save = 0; save < 2; ++save) {
    d.calls.clear();
    ASSERT_TRUE(s.queue(5000).ok());
    ASSERT_TRUE(s.queue(3 * kMiB).ok());
    ASSERT_TRUE(s.queue(100).ok());
    EXPECT_EQ(s.queued(), 3u);
    ASSERT_TRUE(s.finish().ok());
    EXPECT_EQ(d.calls, (Calls{"queue 0", "queue 1", "queue 2", "wait 0", "wait 1", "wait 2"})) << "save " << save;
    EXPECT_EQ(s.queued(), 0u) << "each save numbers its copies from 0";
  }
  d.calls.clear();
  ASSERT_TRUE(s.finish().ok());
  EXPECT_TRUE(d.calls.empty()) << "each copy is waited for once";
}

TEST(Staging, ABufferIsPinnedToItsSizeAndGivenBackByItsLastOwner) {
  StandInStream d;
  std::shared_ptr<char> kept;
  {
    Staging s = d.staging();
    bool pinned = false;
    kept = s.buffer(3 * kMiB, &pinned);
    ASSERT_TRUE(kept && pinned);
    EXPECT_EQ(d.calls, (Calls{"pin 3145728"}));
    EXPECT_EQ(s.pinned_bytes(), 3 * kMiB);
    std::memset(kept.get(), 7, 3 * kMiB);
  }
  EXPECT_TRUE(d.unpinned.empty()) << "the buffer outlives the Staging that made it";
  kept.reset();
  EXPECT_EQ(d.unpinned, (std::vector<uint64_t>{3 * kMiB}));
  EXPECT_TRUE(d.logs.empty());
}

TEST(Staging, APinThatFailsFallsBackToPageableMemorySaidOnce) {
  StandInStream d;
  d.fail = "pin";
  Staging s = d.staging();
  bool pinned = true;
  for (int i = 0; i < 3; ++i) {
    std::shared_ptr<char> b = s.buffer(kMiB, &pinned);
    ASSERT_TRUE(b);
    EXPECT_FALSE(pinned);
    std::memset(b.get(), 1, kMiB);
  }
  EXPECT_EQ(s.pinned_bytes(), 0u);
  ASSERT_EQ(d.logs.size(), 1u);
  EXPECT_NE(d.logs[0].find("cudaHostAlloc: out of memory"), std::string::npos) << d.logs[0];
  EXPECT_NE(d.logs[0].find("pageable memory"), std::string::npos) << d.logs[0];
}

TEST(Staging, NoRoomInHostMemoryToPinIsPageableToo) {
  StandInStream d;
  d.host = 2 * kMiB;  // with 1 GiB kept free, no pinned copy fits
  Staging s = d.staging();
  bool pinned = true;
  ASSERT_TRUE(s.buffer(3 * kMiB, &pinned));
  EXPECT_FALSE(pinned);
  EXPECT_TRUE(d.calls.empty()) << "nothing pinned";
  ASSERT_EQ(d.logs.size(), 1u);
  EXPECT_NE(d.logs[0].find("memory.max of /slurm/job_1"), std::string::npos) << d.logs[0];
}

TEST(Staging, ACopyThatCannotBeQueuedIsNamedAndThoseBeforeItAreWaitedFor) {
  StandInStream d;
  d.fail = "queue";
  d.fail_copy = 1;
  Staging s = d.staging();
  ASSERT_TRUE(s.queue(4096).ok());
  Status st = s.queue(4096);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("device tensor 1"), std::string::npos) << st.message();
  ASSERT_TRUE(s.finish().ok());
  EXPECT_EQ(d.calls, (Calls{"queue 0", "queue 1", "wait 0"})) << "none left running, none waited for twice";
}

TEST(Staging, ACopyThatFailsFailsTheSaveAndTheNextStartsAfresh) {
  StandInStream d;
  d.fail = "wait";
  d.fail_copy = 1;
  Staging s = d.staging();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.queue(4096).ok());
  Status st = s.finish();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the copy of device tensor 1"), std::string::npos) << st.message();
  EXPECT_EQ(d.calls.back(), "wait 2") << "the copies after the failed one are waited for too";
  d.fail.clear();
  ASSERT_TRUE(s.queue(4096).ok());
  EXPECT_TRUE(s.finish().ok());
}

}  // namespace
}  // namespace hydro
