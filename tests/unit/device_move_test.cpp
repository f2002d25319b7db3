// Issue 57: hydro's own move of the device memory (hydro/device_move.h), through a fake device whose
// segments are host buffers at made-up addresses: the order of the calls, every byte out and back
// at the same address, the pinned pool pinned once and reused, and each failure undone or reported
// lost. The driver's calls run on a GPU machine only (scripts/gpu-check).
#include "hydro/device_move.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace hydro {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// A device of segments (address -> bytes, absent once unmapped) and a host of `host` free bytes;
// the `fail_at`-th call (1-based) named `fail` returns an error, and so does every call named in
// `also_fail`.
struct FakeDevice {
  std::map<uint64_t, std::vector<char>> mapped;
  std::map<uint64_t, uint64_t> sizes;  // every segment, mapped or not
  uint64_t host = 64 * kGiB;
  std::string fail, also_fail;
  int fail_at = 1;
  std::map<std::string, int> counts;
  std::vector<std::string> calls, logs;
  uint64_t pinned = 0;         // bytes pinned now
  std::vector<uint64_t> idle;  // segments holding no tensor, by address

  void add(uint64_t address, uint64_t bytes, char fill) {
    mapped[address] = std::vector<char>(bytes, fill);
    mapped[address][0] = static_cast<char>(address & 0x7f);  // each segment's bytes its own
    sizes[address] = bytes;
  }
  Status call(const std::string& name) {
    calls.push_back(name);
    const bool fails = (name == fail && ++counts[name] == fail_at) || name == also_fail;
    return fails ? Status::io(name + " refused") : Status::OK();
  }
  MoveCalls move_calls() {
    MoveCalls c;
    c.segments = [this] {
      std::vector<Segment> out;
      for (const auto& [address, bytes] : mapped) out.push_back({address, bytes.size()});
      return out;
    };
    c.idle = [this] { return idle; };
    c.host_available = [this] { return HostRoom{host - pinned, "memory.max of /slurm/job_1"}; };
    c.pin = [this](uint64_t bytes, void** host_memory) {
      HYDRO_RETURN_IF_ERROR(call("pin"));
      *host_memory = new char[bytes];
      pinned += bytes;
      return Status::OK();
    };
    c.unpin = [this](void* host_memory, uint64_t bytes) {
      calls.push_back("unpin");
      delete[] static_cast<char*>(host_memory);
      pinned -= bytes;
    };
    c.copy_out = [this](const Segment& s, void* to) {
      HYDRO_RETURN_IF_ERROR(call("copy_out"));
      std::copy(mapped.at(s.address).begin(), mapped.at(s.address).end(), static_cast<char*>(to));
      return Status::OK();
    };
    c.copy_in = [this](const Segment& s, const void* from) {
      HYDRO_RETURN_IF_ERROR(call("copy_in"));
      const char* f = static_cast<const char*>(from);
      std::copy(f, f + s.bytes, mapped.at(s.address).begin());
      return Status::OK();
    };
    c.wait_copies = [this] { return call("wait_copies"); };
    c.unmap = [this](const Segment& s) {
      HYDRO_RETURN_IF_ERROR(call("unmap"));
      mapped.erase(s.address);
      return Status::OK();
    };
    c.map = [this](const Segment& s) {
      HYDRO_RETURN_IF_ERROR(call("map"));
      mapped[s.address] = std::vector<char>(sizes.at(s.address), '\xee');  // new memory: not the old bytes
      return Status::OK();
    };
    return c;
  }
  DeviceMove mover() {
    return DeviceMove(move_calls(), [this](const std::string& line) { logs.push_back(line); });
  }
};

using Calls = std::vector<std::string>;

// Three segments of 1, 2 and 3 MiB, and a copy of their bytes.
FakeDevice three_segments(std::map<uint64_t, std::vector<char>>* before) {
  FakeDevice d;
  d.add(0x7f0000000000, 1 * kMiB, 'a');
  d.add(0x7f0000200000, 2 * kMiB, 'b');
  d.add(0x7f0000600000, 3 * kMiB, 'c');
  *before = d.mapped;
  return d;
}

TEST(DeviceMove, EveryByteGoesToPinnedHostMemoryAndComesBackAtTheSameAddress) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  DeviceMove m = d.mover();
  ASSERT_TRUE(m.release().ok());
  EXPECT_TRUE(d.mapped.empty()) << "every segment's physical memory is released";
  EXPECT_TRUE(m.holding());
  EXPECT_EQ(m.moved_bytes(), 6 * kMiB);
  EXPECT_EQ(d.calls, (Calls{"pin", "copy_out", "copy_out", "copy_out", "wait_copies", "unmap", "unmap", "unmap"}))
      << "all copies are queued, then waited for once, before any memory is released";
  d.calls.clear();
  ASSERT_TRUE(m.restore().ok());
  EXPECT_EQ(d.mapped, before) << "the same bytes at the same addresses";
  EXPECT_EQ(d.calls, (Calls{"map", "copy_in", "map", "copy_in", "map", "copy_in", "wait_copies"}));
  EXPECT_FALSE(m.holding());
  EXPECT_NE(d.logs.back().find("6 MiB"), std::string::npos) << d.logs.back();
}

TEST(DeviceMove, AnIdleSegmentIsReleasedWithNoCopyAndMappedBackEmpty) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.idle = {0x7f0000200000};  // the 2 MiB one holds no tensor
  DeviceMove m = d.mover();
  EXPECT_EQ(m.data_bytes(), 4 * kMiB);
  ASSERT_TRUE(m.release().ok());
  EXPECT_TRUE(d.mapped.empty());
  EXPECT_EQ(m.moved_bytes(), 4 * kMiB);
  EXPECT_EQ(m.pool().capacity(), 4 * kMiB + kMiB / 2) << "pinned for the copied bytes only, an eighth more";
  EXPECT_EQ(d.calls, (Calls{"pin", "copy_out", "copy_out", "wait_copies", "unmap", "unmap", "unmap"}));
  d.calls.clear();
  ASSERT_TRUE(m.restore().ok());
  EXPECT_EQ(d.calls, (Calls{"map", "copy_in", "map", "map", "copy_in", "wait_copies"}));
  EXPECT_EQ(d.mapped.at(0x7f0000000000), before.at(0x7f0000000000));
  EXPECT_EQ(d.mapped.at(0x7f0000600000), before.at(0x7f0000600000)) << "the pool's offsets skip the idle one";
  EXPECT_EQ(d.mapped.at(0x7f0000200000).size(), 2 * kMiB) << "mapped again, its old bytes not kept";
}

TEST(DeviceMove, ReleaseIdleReleasesOnlyTheIdleSegmentsWithNoCopyAndRestoreMapsThemBack) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.idle = {0x7f0000200000};
  DeviceMove m = d.mover();
  ASSERT_TRUE(m.release_idle().ok());
  EXPECT_EQ(d.calls, (Calls{"unmap"})) << "nothing pinned, nothing copied";
  EXPECT_EQ(d.mapped.count(0x7f0000200000), 0u);
  EXPECT_EQ(d.mapped.size(), 2u) << "the segments that hold tensors stay";
  EXPECT_FALSE(m.release().ok()) << "a release while the idle ones are out is refused";
  d.calls.clear();
  ASSERT_TRUE(m.restore().ok());
  EXPECT_EQ(d.calls, (Calls{"map", "wait_copies"}));
  EXPECT_EQ(d.mapped.size(), 3u);
  EXPECT_EQ(d.mapped.at(0x7f0000600000), before.at(0x7f0000600000));
}

TEST(DeviceMove, AnUnmapThatFailsAfterAnIdleSegmentRefillsTheOthersFromTheirOwnBytes) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.fail = "unmap";
  d.fail_at = 3;              // the first two released, the 3 MiB one not
  d.idle = {0x7f0000000000};  // the first, so the offsets shift
  DeviceMove m = d.mover();
  Status s = m.release();
  ASSERT_FALSE(s.ok());
  EXPECT_FALSE(m.lost());
  EXPECT_FALSE(m.holding());
  EXPECT_EQ(d.mapped.at(0x7f0000200000), before.at(0x7f0000200000)) << "refilled from its own place in the pool";
  EXPECT_EQ(d.mapped.at(0x7f0000600000), before.at(0x7f0000600000)) << "never released";
  EXPECT_EQ(d.mapped.at(0x7f0000000000).size(), 1 * kMiB) << "the idle one mapped again";
}

TEST(DeviceMove, ThePoolIsPinnedOnceBeforeAnyPauseAndReusedByEveryOne) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  DeviceMove m = d.mover();
  ASSERT_TRUE(m.prepare(6 * kMiB).ok());
  EXPECT_EQ(m.pool().capacity(), 6 * kMiB + 6 * kMiB / 8) << "an eighth more than the need, for a later growth";
  for (int cycle = 0; cycle < 5; ++cycle) {
    ASSERT_TRUE(m.release().ok());
    ASSERT_TRUE(m.restore().ok());
    ASSERT_EQ(d.mapped, before) << "cycle " << cycle;
  }
  EXPECT_EQ(m.pool().pins(), 1) << "no pause pins host memory: the Runtime's start did";
}

TEST(DeviceMove, ThePoolGrowsOnlyWhenTheDeviceHoldsMore) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  DeviceMove m = d.mover();
  ASSERT_TRUE(m.release().ok());
  ASSERT_TRUE(m.restore().ok());
  d.add(0x7f0000c00000, 4 * kMiB, 'd');  // the job grew: 10 MiB now, more than the pool's 6.75
  before = d.mapped;
  ASSERT_TRUE(m.release().ok());
  ASSERT_TRUE(m.restore().ok());
  EXPECT_EQ(d.mapped, before);
  EXPECT_EQ(m.pool().pins(), 2);
  EXPECT_EQ(d.pinned, 10 * kMiB + 10 * kMiB / 8) << "the old pool was given back before the new was pinned";
}

TEST(DeviceMove, APoolThatDoesNotFitInHostMemoryIsRefusedAndNothingMoves) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.host = 6 * kMiB;  // fits_in_host keeps at least 1 GiB free
  DeviceMove m = d.mover();
  Status s = m.release();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("memory.max of /slurm/job_1"), std::string::npos) << s.message();
  EXPECT_TRUE(d.calls.empty()) << "nothing pinned, copied or released";
  EXPECT_EQ(d.mapped, before);
  EXPECT_FALSE(m.holding());
}

TEST(DeviceMove, WhereAnEighthMoreDoesNotFitThePoolIsTheNeedExactly) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.host = kGiB + 6 * kMiB + kMiB / 2;  // the need and the 1 GiB kept free, but not 6.75 MiB
  DeviceMove m = d.mover();
  ASSERT_TRUE(m.release().ok());
  EXPECT_EQ(m.pool().capacity(), 6 * kMiB);
}

TEST(DeviceMove, ACopyThatFailsWaitsForTheQueuedOnesAndReleasesNothing) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.fail = "copy_out";
  d.fail_at = 2;
  DeviceMove m = d.mover();
  Status s = m.release();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0x7f0000200000"), std::string::npos) << "names the segment: " << s.message();
  EXPECT_EQ(d.calls, (Calls{"pin", "copy_out", "copy_out", "wait_copies"}));
  EXPECT_EQ(d.mapped, before);
  EXPECT_TRUE(m.restore().ok()) << "nothing to bring back";
}

TEST(DeviceMove, CopiesThatFailInTheWaitReleaseNothing) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.fail = "wait_copies";
  DeviceMove m = d.mover();
  ASSERT_FALSE(m.release().ok());
  EXPECT_EQ(d.mapped, before);
  EXPECT_FALSE(m.holding());
}

TEST(DeviceMove, AReleaseThatFailsHalfWayRefillsWhatItReleased) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.fail = "unmap";
  d.fail_at = 3;
  DeviceMove m = d.mover();
  Status s = m.release();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0x7f0000600000"), std::string::npos) << s.message();
  EXPECT_EQ(d.mapped, before) << "the two released segments are mapped and filled again";
  EXPECT_FALSE(m.holding());
  EXPECT_TRUE(m.restore().ok());
  d.fail.clear();
  EXPECT_TRUE(m.release().ok()) << "a later pause tries again";
}

TEST(DeviceMove, AnUndoThatFailsIsLostAndTheRestoreSaysSo) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  d.fail = "unmap";
  d.fail_at = 2;
  d.also_fail = "map";
  DeviceMove m = d.mover();
  ASSERT_FALSE(m.release().ok());
  Status s = m.restore();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lost"), std::string::npos) << s.message();
  EXPECT_FALSE(m.release().ok()) << "no further move on a lost device";
}

TEST(DeviceMove, ARestoreThatFailsIsLost) {
  for (const char* step : {"map", "copy_in", "wait_copies"}) {
    std::map<uint64_t, std::vector<char>> before;
    FakeDevice d = three_segments(&before);
    DeviceMove m = d.mover();
    ASSERT_TRUE(m.release().ok());
    d.fail = step;
    Status s = m.restore();
    ASSERT_FALSE(s.ok()) << step;
    EXPECT_NE(s.message().find("the device memory is lost"), std::string::npos) << s.message();
    EXPECT_FALSE(m.restore().ok()) << step << ": still lost";
  }
}

TEST(DeviceMove, ThePoolIsGivenBackWithTheMove) {
  std::map<uint64_t, std::vector<char>> before;
  FakeDevice d = three_segments(&before);
  {
    DeviceMove m = d.mover();
    ASSERT_TRUE(m.release().ok());
    ASSERT_TRUE(m.restore().ok());
    EXPECT_GT(d.pinned, 0u);
  }
  EXPECT_EQ(d.pinned, 0u);
}

}  // namespace
}  // namespace hydro
