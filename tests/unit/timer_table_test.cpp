// The watchdog's timer table and torch elastic's FileTimerServer wire format.
#include "hydro/timer_table.h"

#include <gtest/gtest.h>

#include <csignal>

namespace hydro {
namespace {

using Clock = TimerTable::Clock;
using std::chrono::seconds;

TimerTable::Timer timer(pid_t pid, const std::string& scope, Clock::time_point deadline, int signal = SIGKILL) {
  TimerTable::Timer t;
  t.pid = pid;
  t.scope_id = scope;
  t.deadline = deadline;
  t.signal = signal;
  t.start_time = 1000 + pid;
  return t;
}

TEST(TimerRequest, ParsesWhatTorchFileTimerClientWrites) {
  // Exactly what torch 1.13's FileTimerRequest.to_json() produces for acquire() and release().
  TimerRequest r;
  ASSERT_TRUE(
      parse_timer_request(
          R"({"version": 1, "pid": 4321, "scope_id": "train.py#12", "expiration_time": 1700000000.25, "signal": 9})",
          &r)
          .ok());
  EXPECT_EQ(r.pid, 4321);
  EXPECT_EQ(r.scope_id, "train.py#12");
  EXPECT_DOUBLE_EQ(r.expiration_time, 1700000000.25);
  EXPECT_EQ(r.signal, 9);
  EXPECT_FALSE(r.is_release());
  ASSERT_TRUE(
      parse_timer_request(R"({"version": 1, "pid": 4321, "scope_id": "s", "expiration_time": -1, "signal": 0})", &r)
          .ok());
  EXPECT_TRUE(r.is_release());
  // A signal of 0 or less is legal: the server logs the expiry and kills nothing (as torch does).
  ASSERT_TRUE(
      parse_timer_request(R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": -3})", &r).ok());
  EXPECT_EQ(r.signal, -3);
}

TEST(TimerRequest, FormatsTheSameLineTorchWrites) {
  TimerRequest r;
  r.pid = 77;
  r.scope_id = "step";
  r.expiration_time = 1700000000.5;
  r.signal = 9;
  EXPECT_EQ(format_timer_request(r),
            R"({"version":1,"pid":77,"scope_id":"step","expiration_time":1700000000.5,"signal":9})");
  r.expiration_time = -1;
  r.signal = 0;
  EXPECT_EQ(format_timer_request(r), R"({"version":1,"pid":77,"scope_id":"step","expiration_time":-1,"signal":0})");
  TimerRequest back;
  ASSERT_TRUE(parse_timer_request(format_timer_request(r), &back).ok());
  EXPECT_EQ(back.scope_id, "step");
  EXPECT_TRUE(back.is_release());
}

std::string parse_error(const std::string& line) {
  TimerRequest r;
  Status st = parse_timer_request(line, &r);
  EXPECT_EQ(st.code(), Code::invalid_argument) << line;
  return st.message();
}

TEST(TimerRequest, EachBadRequestHasItsExactError) {
  EXPECT_EQ(parse_error("garbage"), "watchdog request is not a JSON object: garbage");
  EXPECT_EQ(parse_error(R"({"version": 1, "pid": 1)"),
            R"(watchdog request is not a JSON object: {"version": 1, "pid": 1)");
  EXPECT_EQ(parse_error("[1, 2]"), "watchdog request is not a JSON object: [1, 2]");
  EXPECT_EQ(
      parse_error(R"({"version": 2, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
      R"(watchdog request: unknown version 2 (hydro-launch speaks version 1): {"version": 2, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": "1", "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
      R"(watchdog request: unknown version "1" (hydro-launch speaks version 1): {"version": "1", "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
      R"(watchdog request: missing field 'version': {"pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
      R"(watchdog request: missing field 'pid': {"version": 1, "scope_id": "s", "expiration_time": 5, "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": 1, "expiration_time": 5, "signal": 9})"),
      R"(watchdog request: missing field 'scope_id': {"version": 1, "pid": 1, "expiration_time": 5, "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": 1, "scope_id": "s", "signal": 9})"),
      R"(watchdog request: missing field 'expiration_time': {"version": 1, "pid": 1, "scope_id": "s", "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5})"),
      R"(watchdog request: missing field 'signal': {"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": -4, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
      R"(watchdog request: 'pid' must be a positive integer, not -4: {"version": 1, "pid": -4, "scope_id": "s", "expiration_time": 5, "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": 1, "scope_id": 3, "expiration_time": 5, "signal": 9})"),
      R"(watchdog request: 'scope_id' must be a string, not 3: {"version": 1, "pid": 1, "scope_id": 3, "expiration_time": 5, "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": "soon", "signal": 9})"),
      R"(watchdog request: 'expiration_time' must be a number (epoch seconds, negative to release), not "soon": {"version": 1, "pid": 1, "scope_id": "s", "expiration_time": "soon", "signal": 9})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": "KILL"})"),
      R"(watchdog request: 'signal' must be an integer, not "KILL": {"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": "KILL"})");
  EXPECT_EQ(
      parse_error(R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 99})"),
      "watchdog request: signal 99 is out of range (1.." + std::to_string(SIGRTMAX) +
          R"( kills, 0 or negative only logs): {"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 5, "signal": 99})");
}

TEST(TimerTable, ArmReArmAndDisarm) {
  TimerTable t;
  Clock::time_point t0{};
  EXPECT_FALSE(t.next_deadline());
  t.arm(timer(10, "step", t0 + seconds(5)));
  t.arm(timer(10, "save", t0 + seconds(9)));
  t.arm(timer(11, "step", t0 + seconds(7)));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(*t.next_deadline(), t0 + seconds(5));
  // Re-arming (same pid and scope) replaces the deadline; it does not add a timer.
  t.arm(timer(10, "step", t0 + seconds(20)));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(*t.next_deadline(), t0 + seconds(7));
  EXPECT_TRUE(t.take_expired(t0 + seconds(6)).empty()) << "the re-armed timer must not fire at its old deadline";
  EXPECT_TRUE(t.disarm(11, "step"));
  EXPECT_FALSE(t.disarm(11, "step")) << "disarming twice is harmless";
  EXPECT_FALSE(t.disarm(12, "step"));
  EXPECT_EQ(*t.next_deadline(), t0 + seconds(9));
  EXPECT_TRUE(t.disarm(10, "save"));
  EXPECT_TRUE(t.disarm(10, "step"));
  EXPECT_TRUE(t.empty());
  EXPECT_TRUE(t.take_expired(t0 + seconds(100)).empty());
}

TEST(TimerTable, ExpiresInDeadlineOrderOnePerWorkerAndClearsTheWorker) {
  TimerTable t;
  Clock::time_point t0{};
  t.arm(timer(30, "late", t0 + seconds(8)));
  t.arm(timer(20, "b", t0 + seconds(3)));
  t.arm(timer(20, "a", t0 + seconds(2), /*signal=*/0));
  t.arm(timer(20, "future", t0 + seconds(50)));
  t.arm(timer(40, "early", t0 + seconds(1), SIGTERM));
  t.arm(timer(50, "not yet", t0 + seconds(30)));

  auto e = t.take_expired(t0 + seconds(10));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].timer.pid, 40);
  EXPECT_EQ(e[0].timer.signal, SIGTERM);
  EXPECT_EQ(e[0].timer.start_time, 1040u);
  EXPECT_EQ(e[1].timer.pid, 20);
  // The earliest expired timer with a signal decides (like torch): "a" asked for none.
  EXPECT_EQ(e[1].timer.scope_id, "b");
  EXPECT_EQ(e[1].timer.signal, SIGKILL);
  EXPECT_EQ(e[1].first_deadline, t0 + seconds(2));
  EXPECT_EQ(e[1].scopes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(e[2].timer.pid, 30);
  // Every timer of an expired worker is gone, "future" included; others stay.
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(*t.next_deadline(), t0 + seconds(30));
  EXPECT_TRUE(t.take_expired(t0 + seconds(10)).empty()) << "an expiry is reported once";
}

TEST(TimerTable, AWorkerWhoseTimersAllAskForNoSignalIsReportedWithSignalZero) {
  TimerTable t;
  Clock::time_point t0{};
  t.arm(timer(7, "quiet", t0 + seconds(1), 0));
  auto e = t.take_expired(t0 + seconds(1));  // a deadline equal to now has expired
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].timer.signal, 0);
  EXPECT_TRUE(t.empty());
}

TEST(TimerTable, ShiftMovesEveryDeadlineLater) {
  TimerTable table;
  const auto t0 = TimerTable::Clock::time_point{} + std::chrono::seconds(100);
  table.arm({1, "a", t0, 9, 0});
  table.arm({2, "b", t0 + std::chrono::seconds(5), 9, 0});
  table.shift(std::chrono::seconds(30));
  EXPECT_EQ(table.next_deadline(), t0 + std::chrono::seconds(30));
  EXPECT_TRUE(table.take_expired(t0 + std::chrono::seconds(29)).empty());
  EXPECT_EQ(table.take_expired(t0 + std::chrono::seconds(35)).size(), 2u);
}

TEST(TimerTable, ClearDropsOnlyThatWorker) {
  TimerTable t;
  Clock::time_point t0{};
  t.arm(timer(1, "x", t0));
  t.arm(timer(2, "x", t0));
  t.arm(timer(2, "y", t0));
  t.arm(timer(3, "x", t0));
  t.clear(2);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_FALSE(t.disarm(2, "y"));
  EXPECT_TRUE(t.disarm(1, "x"));
  EXPECT_TRUE(t.disarm(3, "x"));
}

}  // namespace
}  // namespace hydro
