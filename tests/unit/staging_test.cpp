// Issue 58: the host side of a checkpoint of device tensors (hydro/staging.h), over a CPU stand-in
// for the copy stream: copies are queued, and run in order only when a wait asks for one (as a
// stream's event is waited for). So a test sees which copies a write waited for, and that the
// others were still queued behind it. The CUDA calls run on a GPU machine only (scripts/gpu-check).
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

// Device tensors (host buffers here) and a stream whose queued copies run, in order, when waited for.
struct StandInStream {
  std::vector<std::vector<char>> tensors;
  std::vector<std::pair<size_t, void*>> queued;
  size_t ran = 0;  // the first `ran` queued copies have run
  std::vector<std::string> calls, logs;
  std::string fail;  // "pin", "copy_out" or "wait": fails for item `fail_item` (pin: always)
  size_t fail_item = 0;
  uint64_t host = 64 * kGiB;
  int pins = 0;

  explicit StandInStream(std::vector<uint64_t> sizes) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      tensors.emplace_back(sizes[i], static_cast<char>('a' + i));
      if (!tensors.back().empty()) tensors.back()[0] = static_cast<char>('A' + i);
    }
  }
  std::vector<uint64_t> sizes() const {
    std::vector<uint64_t> out;
    for (const auto& t : tensors) out.push_back(t.size());
    return out;
  }
  StagingCalls calls_for() {
    StagingCalls c;
    c.pin = [this](uint64_t bytes, void** host_memory) {
      calls.push_back("pin");
      if (fail == "pin") return Status::io("cudaHostAlloc: out of memory");
      *host_memory = new char[bytes];
      ++pins;
      return Status::OK();
    };
    c.unpin = [](void* host_memory, uint64_t) { delete[] static_cast<char*>(host_memory); };
    c.host_available = [this] { return HostRoom{host, "memory.max of /slurm/job_1"}; };
    c.copy_out = [this](size_t item, void* to) {
      calls.push_back("copy_out " + std::to_string(item));
      if (fail == "copy_out" && item == fail_item) return Status::io("cudaMemcpyAsync: invalid argument");
      queued.emplace_back(item, to);
      return Status::OK();
    };
    c.wait = [this](size_t item) {
      calls.push_back("wait " + std::to_string(item));
      while (ran < queued.size() && queued[ran].first <= item) {
        const auto& [i, to] = queued[ran++];
        std::memcpy(to, tensors[i].data(), tensors[i].size());
      }
      if (fail == "wait" && item == fail_item) return Status::io("cudaEventSynchronize: an illegal memory access");
      return Status::OK();
    };
    return c;
  }
  Staging staging() {
    return Staging(calls_for(), [this](const std::string& line) { logs.push_back(line); });
  }
  bool landed(const Staging& s, size_t item) const {
    return std::memcmp(s.slot(item), tensors[item].data(), tensors[item].size()) == 0;
  }
};

using Calls = std::vector<std::string>;

TEST(Staging, AWriteWaitsForTheCopyOfItsOwnBytesOnlyWhileTheNextOnesCopy) {
  StandInStream d({5000, 3 * kMiB, 100});
  Staging s = d.staging();
  ASSERT_TRUE(s.stage(d.sizes()).ok());
  EXPECT_EQ(d.calls, (Calls{"pin", "copy_out 0", "copy_out 1", "copy_out 2"})) << "every copy queued at once";
  EXPECT_TRUE(s.pinned());
  char header[16] = {};
  ASSERT_TRUE(s.ready(header, sizeof header).ok());
  EXPECT_EQ(d.ran, 0u) << "a file's own bytes wait for no copy";
  ASSERT_TRUE(s.ready(s.slot(0), 5000).ok());
  EXPECT_EQ(d.ran, 1u) << "the write of the first tensor goes on while the others still copy";
  EXPECT_TRUE(d.landed(s, 0));
  ASSERT_TRUE(s.ready(s.slot(2), 100).ok());
  EXPECT_TRUE(d.landed(s, 1) && d.landed(s, 2));
  d.calls.clear();
  ASSERT_TRUE(s.ready(s.slot(1) + 10, 20).ok());
  ASSERT_TRUE(s.finish().ok());
  EXPECT_EQ(d.calls, (Calls{"wait 1"})) << "each copy is waited for once";
}

TEST(Staging, BytesAcrossTwoSlotsWaitForBoth) {
  StandInStream d({5000, 3000, 100});
  Staging s = d.staging();
  ASSERT_TRUE(s.stage(d.sizes()).ok());
  ASSERT_TRUE(s.ready(s.slot(0) + 4000, static_cast<size_t>(s.slot(1) - s.slot(0))).ok());
  EXPECT_EQ(d.calls, (Calls{"pin", "copy_out 0", "copy_out 1", "copy_out 2", "wait 0", "wait 1"}));
  EXPECT_EQ(s.slot(1) - s.slot(0), 8192) << "each slot starts on a page";
}

TEST(Staging, TheArenaIsPinnedOnceAndReusedBySavesThatFit) {
  StandInStream d({2 * kMiB, kMiB});
  Staging s = d.staging();
  for (int save = 0; save < 3; ++save) {
    ASSERT_TRUE(s.stage(d.sizes()).ok());
    ASSERT_TRUE(s.finish().ok());
    EXPECT_TRUE(d.landed(s, 0) && d.landed(s, 1)) << "save " << save;
  }
  EXPECT_EQ(d.pins, 1);
  EXPECT_EQ(s.pool().capacity(), 3 * kMiB + 3 * kMiB / 8) << "an eighth more than it needs";
  d.tensors = StandInStream({8 * kMiB}).tensors;
  ASSERT_TRUE(s.stage(d.sizes()).ok());
  ASSERT_TRUE(s.finish().ok());
  EXPECT_EQ(d.pins, 2) << "a save that needs more pins anew";
  EXPECT_TRUE(d.landed(s, 0));
}

TEST(Staging, APinThatFailsFallsBackToPageableMemorySaidOnce) {
  StandInStream d({3 * kMiB, 4096});
  d.fail = "pin";
  Staging s = d.staging();
  for (int save = 0; save < 2; ++save) {
    ASSERT_TRUE(s.stage(d.sizes()).ok());
    ASSERT_TRUE(s.finish().ok());
    EXPECT_TRUE(d.landed(s, 0) && d.landed(s, 1));
  }
  EXPECT_FALSE(s.pinned());
  ASSERT_EQ(d.logs.size(), 1u);
  EXPECT_NE(d.logs[0].find("cudaHostAlloc: out of memory"), std::string::npos) << d.logs[0];
  EXPECT_NE(d.logs[0].find("pageable memory"), std::string::npos) << d.logs[0];
}

TEST(Staging, NoRoomInHostMemoryToPinIsPageableToo) {
  StandInStream d({3 * kMiB});
  d.host = 2 * kMiB;  // with 1 GiB kept free, no pinned copy fits
  Staging s = d.staging();
  ASSERT_TRUE(s.stage(d.sizes()).ok());
  ASSERT_TRUE(s.finish().ok());
  EXPECT_FALSE(s.pinned());
  EXPECT_EQ(d.pins, 0);
  EXPECT_TRUE(d.landed(s, 0));
  ASSERT_EQ(d.logs.size(), 1u);
  EXPECT_NE(d.logs[0].find("memory.max of /slurm/job_1"), std::string::npos) << d.logs[0];
}

TEST(Staging, ACopyThatCannotBeQueuedIsAnErrorAndThoseBeforeItAreWaitedFor) {
  StandInStream d({4096, 4096, 4096});
  d.fail = "copy_out";
  d.fail_item = 1;
  Staging s = d.staging();
  Status st = s.stage(d.sizes());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tensor 1"), std::string::npos) << st.message();
  EXPECT_EQ(d.calls, (Calls{"pin", "copy_out 0", "copy_out 1", "wait 0"})) << "none left running into the arena";
  EXPECT_FALSE(s.ready(s.slot(0), 10).ok()) << "a save that failed writes nothing";
}

TEST(Staging, ACopyThatFailsFailsTheWriteOfItsBytesAndEveryLaterOne) {
  StandInStream d({4096, 4096, 4096});
  d.fail = "wait";
  d.fail_item = 1;
  Staging s = d.staging();
  ASSERT_TRUE(s.stage(d.sizes()).ok());
  ASSERT_TRUE(s.ready(s.slot(0), 4096).ok());
  Status st = s.ready(s.slot(1), 4096);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("the copy of tensor 1"), std::string::npos) << st.message();
  EXPECT_FALSE(s.ready(s.slot(2), 4096).ok());
  EXPECT_FALSE(s.finish().ok());
  d.fail.clear();
  ASSERT_TRUE(s.stage(d.sizes()).ok()) << "a later save starts afresh";
  ASSERT_TRUE(s.finish().ok());
  EXPECT_TRUE(d.landed(s, 1));
}

}  // namespace
}  // namespace hydro
