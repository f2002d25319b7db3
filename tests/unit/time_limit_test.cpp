// hydro-launch's watch on the job's EndTime (launcher/time_limit.h), on a fake clock and a fake
// scontrol; the real one runs in tests/integration/time_limit.sh.
#include "time_limit.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <optional>
#include <string>
#include <vector>

namespace hydro::launcher {
namespace {

struct Fake {
  std::optional<std::time_t> end;
  int reads = 0;
  std::vector<std::string> said;
  TimeLimitWatch watch(int margin) {
    return TimeLimitWatch(
        margin,
        [this] {
          ++reads;
          return end;
        },
        [this](const std::string& m) { said.push_back(m); });
  }
};

TEST(TimeLimit, EndTimeIsReadFromScontrolInLocalTime) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 23;
  tm.tm_hour = 8;
  tm.tm_min = 18;
  tm.tm_sec = 30;
  tm.tm_isdst = -1;
  std::time_t want = std::mktime(&tm);
  EXPECT_EQ(end_time("   RunTime=00:00:10 TimeLimit=00:01:00\n   StartTime=2026-11-23T08:17:30 "
                     "EndTime=2026-11-23T08:18:30 Deadline=N/A\n"),
            want);
  EXPECT_EQ(end_time("   StartTime=1795421850 EndTime=1795421910 Deadline=N/A\n"), 1795421910);
  EXPECT_EQ(end_time("EndTime=Unknown Deadline=N/A"), std::nullopt);
  EXPECT_EQ(end_time("EndTime=None"), std::nullopt);
  EXPECT_EQ(end_time("slurm_load_jobs error: Invalid job id specified"), std::nullopt);
}

TEST(TimeLimit, FiresOnceAtTheMarginAndNotBefore) {
  Fake f;
  f.end = 1000;
  TimeLimitWatch w = f.watch(60);
  EXPECT_EQ(w.poll_timeout_ms(100), 0) << "the first check is at once";
  EXPECT_FALSE(w.check(100));
  EXPECT_EQ(f.said.at(0), "time limit: the job ends at 900 s from now; checkpointing 60 s before");
  // EndTime is read again every 5 minutes, then at the deadline.
  EXPECT_EQ(w.poll_timeout_ms(100), TimeLimitWatch::kRereadSeconds * 1000);
  EXPECT_FALSE(w.check(399));
  EXPECT_FALSE(w.check(400));
  EXPECT_EQ(w.poll_timeout_ms(400), 300 * 1000);
  EXPECT_FALSE(w.check(700));
  EXPECT_EQ(w.poll_timeout_ms(700), 240 * 1000);
  EXPECT_TRUE(w.check(940));
  EXPECT_EQ(w.poll_timeout_ms(941), -1);
  EXPECT_FALSE(w.check(2000)) << "only once";
  EXPECT_EQ(f.reads, 4);
}

TEST(TimeLimit, FollowsATimeLimitChangedWhileRunning) {
  Fake f;
  f.end = 1000;
  TimeLimitWatch w = f.watch(60);
  EXPECT_FALSE(w.check(800));
  f.end = 5000;  // scontrol update TimeLimit=...
  EXPECT_FALSE(w.check(940)) << "extended: not yet";
  EXPECT_EQ(w.poll_timeout_ms(940), 300 * 1000);
  f.end = 1300;  // shortened
  EXPECT_FALSE(w.check(1240 - 1)) << "not due before the next re-read";
  EXPECT_TRUE(w.check(1240));
}

TEST(TimeLimit, AJobThatStartsInsideTheMarginIsNotRequeuedEarly) {
  Fake f;
  f.end = 130;
  TimeLimitWatch w = f.watch(60);
  EXPECT_FALSE(w.check(100));
  EXPECT_EQ(w.poll_timeout_ms(100), -1);
  ASSERT_EQ(f.said.size(), 1u);
  EXPECT_EQ(f.said[0],
            "warning: time limit: the job ends in 30 s, within --time-limit-margin 60 s already at the start; "
            "not requeueing early this run");
}

TEST(TimeLimit, AnUnreadableEndTimeIsRetried) {
  Fake f;
  TimeLimitWatch w = f.watch(60);
  EXPECT_FALSE(w.check(0));
  EXPECT_EQ(f.said.at(0), "time limit: cannot read the job's EndTime from scontrol; trying again every 60 s");
  EXPECT_EQ(w.poll_timeout_ms(0), 60 * 1000);
  f.end = 100;  // now readable, and inside the margin: after the start, so it fires
  EXPECT_TRUE(w.check(60));
  EXPECT_EQ(f.said.size(), 1u);
}

// In a container there is no scontrol: the end comes from SLURM_JOB_END_TIME, said once.
TEST(TimeLimit, WithNoScontrolTheEndIsSlurmJobEndTime) {
  EXPECT_EQ(end_time_from_env("1796000000"), 1796000000);
  EXPECT_EQ(end_time_from_env(nullptr), std::nullopt);
  EXPECT_EQ(end_time_from_env("Unknown"), std::nullopt);
  EXPECT_EQ(end_time_from_env("17960x0000"), std::nullopt);
  ::setenv("SLURM_JOB_END_TIME", "1796000000", 1);
  std::vector<std::string> said;
  TimeLimitWatch::ReadEnd read =
      TimeLimitWatch::from_scontrol("/nonexistent/scontrol", "4242", [&](const std::string& s) { said.push_back(s); });
  EXPECT_EQ(read(), 1796000000);
  EXPECT_EQ(read(), 1796000000);
  ::unsetenv("SLURM_JOB_END_TIME");
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("the job's end from SLURM_JOB_END_TIME instead"), std::string::npos) << said[0];
}

}  // namespace
}  // namespace hydro::launcher
