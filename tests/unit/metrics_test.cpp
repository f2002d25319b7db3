// hydro::MetricsTracker and the JobRunner's checkpoint record (hydro::JobState).
#include "hydro/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hydro/job_state.h"

namespace hydro {
namespace {

MetricsTracker tracker(std::initializer_list<std::pair<const char*, double>> values) {
  MetricsTracker m;
  for (const auto& [name, v] : values) m.add(name, v);
  return m;
}

TEST(Metrics, AddKeepsSumCountMinMaxAndMean) {
  MetricsTracker m = tracker({{"loss", 3.0}, {"loss", 1.0}, {"loss", 2.0}, {"acc", 0.5}});
  const MetricStats& loss = m.epoch_summary().at("loss");
  EXPECT_EQ(loss.sum, 6.0);
  EXPECT_EQ(loss.count, 3);
  EXPECT_EQ(loss.min, 1.0);
  EXPECT_EQ(loss.max, 3.0);
  EXPECT_EQ(m.mean("loss"), 2.0);
  EXPECT_EQ(m.mean("acc"), 0.5);
  EXPECT_TRUE(std::isnan(m.mean("missing")));
  EXPECT_EQ(m.names(), (std::vector<std::string>{"acc", "loss"}));
  m.reset_epoch();
  EXPECT_TRUE(m.empty());
  EXPECT_TRUE(std::isnan(m.mean("loss")));
}

TEST(Metrics, MergeAddsSumsAndCountsAndTakesMinOfMinsAndMaxOfMaxes) {
  MetricsTracker a = tracker({{"loss", 4.0}, {"loss", 2.0}});
  MetricsTracker b = tracker({{"loss", 1.0}, {"loss", 9.0}, {"loss", 5.0}});
  ASSERT_TRUE(a.merge(b).ok());
  const MetricStats& s = a.epoch_summary().at("loss");
  EXPECT_EQ(s.sum, 21.0);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 9.0);
  EXPECT_EQ(a.mean("loss"), 21.0 / 5);
}

TEST(Metrics, MergeOfDifferentNamesNamesTheMetricAndChangesNothing) {
  MetricsTracker a = tracker({{"loss", 1.0}, {"acc", 0.5}});
  const MetricsTracker before = a;
  Status st = a.merge(tracker({{"loss", 2.0}}));
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_EQ(st.message(),
            "merging metrics: 'acc' is missing from the other tracker: every rank must add() the same names");
  EXPECT_TRUE(a == before);
  st = a.merge(tracker({{"loss", 2.0}, {"acc", 1.0}, {"top5", 1.0}}));
  EXPECT_EQ(st.message(), "merging metrics: 'top5' is only in the other tracker: every rank must add() the same names");
  EXPECT_TRUE(a == before);
}

TEST(Metrics, SerializationRoundTripsBitForBitIncludingNonFiniteValues) {
  MetricsTracker m = tracker({{"loss", 0.1},
                              {"loss", 1.0 / 3},
                              {"loss", 1e-300},
                              {"big", 1e300},
                              {"inf", HUGE_VAL},
                              {"ninf", -HUGE_VAL},
                              {"nan", std::nan("")}});
  const std::string text = m.serialize();
  MetricsTracker back;
  ASSERT_TRUE(MetricsTracker::parse(text, "test", &back).ok());
  EXPECT_TRUE(back == m);
  EXPECT_EQ(back.serialize(), text) << "the form is stable";
  EXPECT_EQ(MetricsTracker().serialize(), R"({"format":"hydro-metrics/1","metrics":{}})");
  EXPECT_EQ(tracker({{"b", 2.5}, {"a", 1.0}}).serialize(),
            R"({"format":"hydro-metrics/1","metrics":{"a":{"count":1,"max":1.0,"min":1.0,"sum":1.0},)"
            R"("b":{"count":1,"max":2.5,"min":2.5,"sum":2.5}}})");
}

TEST(Metrics, ParseRejectsBadInputWithExactMessages) {
  const std::pair<const char*, const char*> cases[] = {
      {"{not json", "rank 1: not JSON (syntax error at byte 3)"},
      {"[]", "rank 1: format is not hydro-metrics/1"},
      {R"({"format":"hydro-metrics/2","metrics":{}})", "rank 1: format is not hydro-metrics/1"},
      {R"({"format":"hydro-metrics/1"})", "rank 1: 'metrics' is missing"},
      {R"({"format":"hydro-metrics/1","metrics":[]})", "rank 1: 'metrics' is not an object"},
      {R"({"format":"hydro-metrics/1","metrics":{"loss":1}})", "rank 1: metric 'loss' is not an object"},
      {R"({"format":"hydro-metrics/1","metrics":{"loss":{"sum":1,"min":1,"max":1}}})",
       "rank 1: metric 'loss': 'count' is missing or not a whole number above 0"},
      {R"({"format":"hydro-metrics/1","metrics":{"loss":{"count":0,"sum":1,"min":1,"max":1}}})",
       "rank 1: metric 'loss': 'count' is missing or not a whole number above 0"},
      {R"({"format":"hydro-metrics/1","metrics":{"loss":{"count":1,"sum":"x","min":1,"max":1}}})",
       "rank 1: metric 'loss': 'sum' is missing or not a number"},
      {R"({"format":"hydro-metrics/1","metrics":{"loss":{"count":1,"sum":1,"max":1}}})",
       "rank 1: metric 'loss': 'min' is missing or not a number"},
  };
  for (const auto& [text, message] : cases) {
    MetricsTracker out = tracker({{"kept", 1.0}});
    Status st = MetricsTracker::parse(text, "rank 1", &out);
    EXPECT_EQ(st.code(), Code::corruption) << text;
    EXPECT_EQ(st.message(), message) << text;
    EXPECT_EQ(out.names(), std::vector<std::string>{"kept"}) << "a failed parse leaves the output alone";
  }
}

TEST(JobStateRecord, RoundTripsWithHistory) {
  JobState s;
  s.epoch_start_step = 40;
  s.metrics = tracker({{"loss", 0.25}});
  s.add_history({0, 20, tracker({{"loss", 1.5}, {"loss", 0.7}}).epoch_summary()});
  s.add_history({1, 40, tracker({{"loss", 0.3}}).epoch_summary()});
  JobState back;
  ASSERT_TRUE(JobState::parse(s.serialize(), "hydro_job.pt", &back).ok());
  EXPECT_EQ(back.epoch_start_step, 40);
  EXPECT_TRUE(back.metrics == s.metrics);
  EXPECT_EQ(back.history(), s.history());
  EXPECT_EQ(back.serialize(), s.serialize());
}

TEST(JobStateRecord, ParseRejectsBadInputWithExactMessages) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "f: not JSON (syntax error at byte 1)"},
      {R"({"format":"hydro-job/0"})", "f: format is not hydro-job/1"},
      {R"({"format":"hydro-job/1","metrics":{},"history":[]})",
       "f: 'epoch_start_step' is missing or not a whole number >= 0"},
      {R"({"format":"hydro-job/1","epoch_start_step":-1})",
       "f: 'epoch_start_step' is missing or not a whole number >= 0"},
      {R"({"format":"hydro-job/1","epoch_start_step":1,"history":[]})", "f: 'metrics' is missing"},
      {R"({"format":"hydro-job/1","epoch_start_step":1,"metrics":{"format":"hydro-metrics/1","metrics":{}}})",
       "f: 'history' is missing or not a list"},
      {R"({"format":"hydro-job/1","epoch_start_step":1,"metrics":{"format":"hydro-metrics/1","metrics":{}},)"
       R"("history":[{"epoch":0,"metrics":{}}]})",
       "f: history[0]: 'step' is missing or not a whole number >= 0"},
  };
  for (const auto& [text, message] : cases) {
    JobState out;
    Status st = JobState::parse(text, "f", &out);
    EXPECT_EQ(st.code(), Code::corruption) << text;
    EXPECT_EQ(st.message(), message) << text;
  }
}

}  // namespace
}  // namespace hydro
