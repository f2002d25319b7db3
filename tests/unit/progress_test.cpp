// hydro::ProgressReporter with an injected clock: the progress and epoch lines, and the JSON lines
// of HYDRO_METRICS_FILE. Nothing here depends on real time.
#include "hydro/progress.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "fault_fs.h"

namespace hydro {
namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Progress, OptionsFromEnvironment) {
  std::map<std::string, std::string> env{{"HYDRO_PROGRESS_EVERY", "5"}, {"HYDRO_METRICS_FILE", "/tmp/m.jsonl"}};
  auto get = [&](const char* v) { return env.count(v) ? env[v].c_str() : nullptr; };
  ProgressOptions o;
  ASSERT_TRUE(ProgressOptions::from_env(&o, get).ok());
  EXPECT_EQ(o.every_s, 5);
  EXPECT_EQ(o.metrics_file, "/tmp/m.jsonl");
  env.clear();
  ASSERT_TRUE(ProgressOptions::from_env(&o, get).ok());
  EXPECT_EQ(o.every_s, 30);
  EXPECT_EQ(o.metrics_file, "");
}

TEST(Progress, BadOptionsNameTheVariable) {
  ProgressOptions o;
  Status st = ProgressOptions::from_env(
      &o, [](const char* v) { return std::string(v) == "HYDRO_PROGRESS_EVERY" ? "soon" : nullptr; });
  EXPECT_EQ(st.message(), "HYDRO_PROGRESS_EVERY='soon' is not a whole number");
  st = ProgressOptions::from_env(
      &o, [](const char* v) { return std::string(v) == "HYDRO_PROGRESS_EVERY" ? "-1" : nullptr; });
  EXPECT_EQ(st.message(), "HYDRO_PROGRESS_EVERY=-1 is out of range [0, 86400]");
  ProgressOptions bad;
  bad.metrics_file = "/nonexistent-dir/m.jsonl";
  ProgressReporter r(bad);
  st = r.open();
  EXPECT_EQ(st.code(), Code::not_found);
  EXPECT_EQ(st.message(), "HYDRO_METRICS_FILE: opening /nonexistent-dir/m.jsonl: No such file or directory");
}

TEST(Progress, LineTexts) {
  MetricsTracker m;
  m.add("loss", 0.5);
  m.add("loss", 0.25);
  EXPECT_EQ(ProgressReporter::progress_text(120, 500, 2, 10.0, m),
            "step 120/500 epoch 2: 10 steps/s, ETA 0:00:38, loss 0.375");
  EXPECT_EQ(ProgressReporter::progress_text(120, 0, 2, 2.5, m), "step 120 epoch 2: 2.5 steps/s, loss 0.375");
  EXPECT_EQ(ProgressReporter::progress_text(7, 0, 0, -1, MetricsTracker()), "step 7 epoch 0");
  EXPECT_EQ(ProgressReporter::progress_text(0, 400000, 0, 1.0, MetricsTracker()),
            "step 0/400000 epoch 0: 1 steps/s, ETA 111:06:40");
  EpochMetrics e{3, 80, m.epoch_summary()};
  EXPECT_EQ(ProgressReporter::epoch_text(e), "epoch 3 done at step 80: loss 0.375 (min 0.25, max 0.5, n 2)");
}

TEST(Progress, ReportsAtTheIntervalAndWritesJsonLines) {
  test::TempDir t;
  ProgressOptions o;
  o.every_s = 10;
  o.metrics_file = t.path + "/metrics.jsonl";
  int64_t now = 0;
  ProgressReporter r(o, [&] { return now; });
  ASSERT_TRUE(r.open().ok());
  r.start(100, 300);
  MetricsTracker m;
  m.add("loss", 2.0);
  now = 9'000'000'000;
  r.step(110, 1, m);  // 9 s: not yet
  now = 20'000'000'000;
  r.step(140, 1, m);  // 20 s since start, 40 steps: 2 steps/s, ETA 80 s
  now = 25'000'000'000;
  r.step(150, 1, m);  // 5 s since the last line: not yet
  r.epoch_end({1, 150, m.epoch_summary()});
  auto lines = lines_of(o.metrics_file);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(R"("event":"progress")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("step":140)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("steps_per_s":2.0)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("eta_s":80.0)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("metrics":{"loss":2.0})"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(R"("event":"epoch_end")"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(R"("metrics":{"loss":{"count":1,"max":2.0,"mean":2.0,"min":2.0}})"), std::string::npos)
      << lines[1];
}

TEST(Progress, ZeroIntervalWritesOnlyEpochLines) {
  test::TempDir t;
  ProgressOptions o;
  o.every_s = 0;
  o.metrics_file = t.path + "/metrics.jsonl";
  int64_t now = 0;
  ProgressReporter r(o, [&] { return now; });
  ASSERT_TRUE(r.open().ok());
  r.start(0, 0);
  now = 1'000'000'000'000;
  r.step(5, 0, MetricsTracker());
  r.epoch_end({0, 5, {}});
  auto lines = lines_of(o.metrics_file);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(R"("event":"epoch_end")"), std::string::npos);
}

}  // namespace
}  // namespace hydro
