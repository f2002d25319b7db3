// hydro::JobRunner over a real Runtime: init/exit/stop conditions, the epoch-end checkpoint, and
// a run interrupted by SIGTERM three times (mid-epoch, on an epoch's last step, before an epoch's
// first step) that ends with the same bits and epoch metrics as an uninterrupted run. Also
// hydro::all_reduce_metrics over two ranks in this process, on the collectives join_gloo_group
// gives in this tier (gloo_backend.h: Gloo, or hydro's over the store).
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstring>
#include <fstream>
#include <thread>

#include "error_of.h"
#include "fault_fs.h"
#include "gloo_backend.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/distributed.h"
#include "hydro/job.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"

namespace hydro {
namespace {

constexpr int64_t kStepsPerEpoch = 5;

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

// What the job's phases did, over every "process" of one test.
struct Calls {
  int init = 0, exit = 0;
  std::vector<std::pair<int64_t, int64_t>> epochs;  // (epoch, epoch_step()) at each epoch call
};

// One process's life: a model (weights drawn from `seed`, which resume() must replace), a Runtime
// on `dir` and a JobRunner. SIGTERM is raised during global step `term_step`, or at the top of
// epoch `term_epoch` before its first step.
struct Process {
  Process(const std::string& dir, uint64_t seed) : rt(settings(dir)) {
    torch::manual_seed(seed);
    model = torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Dropout(0.3),
                                  torch::nn::Linear(32, 4));
    opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    rt.track("model", *model);
    rt.track("optimizer", *opt);
  }
  static Settings settings(const std::string& dir) {
    Settings s;
    s.checkpoint_dir = dir;
    s.keep_last = 0;
    s.checkpoint_every = 4;  // periodic checkpoints too, one on an epoch's last step (20)
    return s;
  }
  Job job(Calls& calls, int64_t term_step = -1, int64_t term_epoch = -1) {
    Job j;
    j.init = [&calls](JobContext&) {
      ++calls.init;
      torch::manual_seed(5);  // the dropout's stream: rerunning it on a resume would change the bits
    };
    j.epoch = [this, &calls, term_step, term_epoch](int64_t epoch, JobContext& ctx) {
      calls.epochs.push_back({epoch, ctx.epoch_step()});
      if (epoch == term_epoch) ::raise(SIGTERM);
      for (int64_t i = ctx.epoch_step(); i < kStepsPerEpoch; ++i) {
        torch::Tensor x = torch::randn({16, 8});
        opt->zero_grad();
        torch::Tensor loss = model->forward(x).pow(2).mean();
        loss.backward();
        opt->step();
        ctx.metrics().add("loss", loss.item<double>());
        ctx.metrics().add("x", x.mean().item<double>());
        if (ctx.step() + 1 == term_step) ::raise(SIGTERM);
        if (!ctx.step_end(i + 1)) return;
      }
    };
    j.exit = [&calls](JobContext&) { ++calls.exit; };
    j.steps_per_epoch = kStepsPerEpoch;
    return j;
  }
  Runtime rt;
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<torch::optim::SGD> opt;
};

ProgressOptions quiet() {
  ProgressOptions o;
  o.every_s = 0;
  return o;
}

Manifest latest_manifest(const std::string& dir) {
  CheckpointDir d(dir);
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  EXPECT_TRUE(d.latest_valid(&found, &warnings).ok());
  Manifest m;
  if (found) {
    EXPECT_TRUE(d.verify(found->name, &m).ok());
  }
  return m;
}

class JobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override { PauseGate::instance().reset_for_test(); }
  void TearDown() override { PauseGate::instance().reset_for_test(); }
};

TEST_F(JobRunnerTest, InitOnceEpochsUntilTheLimiterExitOnceAndEveryEpochEndCheckpointed) {
  test::TempDir t;
  Calls calls;
  Process p(t.path, 1);
  ProgressOptions progress = quiet();
  progress.metrics_file = t.path + "/metrics.jsonl";
  JobRunner runner(p.rt, progress);
  Job job = p.job(calls);
  job.epoch_limiter(3);
  EXPECT_EQ(runner.run(job), 0);
  EXPECT_EQ(calls.init, 1);
  EXPECT_EQ(calls.exit, 1);
  EXPECT_EQ(calls.epochs, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 0}, {2, 0}}));
  ASSERT_EQ(runner.history().size(), 3u);
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(runner.history()[e].epoch, e);
    EXPECT_EQ(runner.history()[e].step, (e + 1) * kStepsPerEpoch);
    EXPECT_EQ(runner.history()[e].metrics.at("loss").count, kStepsPerEpoch);
  }
  Manifest m = latest_manifest(t.path);
  EXPECT_EQ(m.step, 15);
  EXPECT_EQ(m.epoch, 3) << "an epoch-end checkpoint records the next epoch";
  std::ifstream in(progress.metrics_file);
  int epoch_lines = 0;
  for (std::string line; std::getline(in, line);)
    epoch_lines += line.find(R"("event":"epoch_end")") != std::string::npos;
  EXPECT_EQ(epoch_lines, 3);
}

TEST_F(JobRunnerTest, RestartAfterAnEpochEndCheckpointBeginsTheNextEpochWithoutInit) {
  test::TempDir t;
  Calls calls;
  {
    Process p(t.path, 1);
    JobRunner runner(p.rt, quiet());
    Job job = p.job(calls);
    job.epoch_limiter(2);
    ASSERT_EQ(runner.run(job), 0);
  }
  calls.epochs.clear();
  Process p(t.path, 2);
  JobRunner runner(p.rt, quiet());
  Job job = p.job(calls);
  job.epoch_limiter(3);
  EXPECT_EQ(runner.run(job), 0);
  EXPECT_EQ(calls.init, 1) << "init runs on a fresh start only";
  EXPECT_EQ(calls.exit, 2);
  EXPECT_EQ(calls.epochs, (std::vector<std::pair<int64_t, int64_t>>{{2, 0}}));
  ASSERT_EQ(runner.history().size(), 3u) << "the finished epochs' metrics come back from the checkpoint";
  EXPECT_EQ(runner.history()[2].step, 15);
}

TEST_F(JobRunnerTest, AUserPredicateStopsBeforeAnEpoch) {
  test::TempDir t;
  Calls calls;
  Process p(t.path, 1);
  JobRunner runner(p.rt, quiet());
  Job job = p.job(calls);
  std::vector<int64_t> asked;
  job.stop_when([&](const JobContext& ctx) {
    asked.push_back(ctx.epoch());
    return ctx.history().size() == 2 && ctx.epoch_step() == 0;
  });
  EXPECT_EQ(runner.run(job), 0);
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(calls.epochs.size(), 2u);
  EXPECT_EQ(calls.exit, 1);
}

// Four epochs, never interrupted: the weights and the history every interrupted run must match.
void run_uninterrupted(std::vector<torch::Tensor>* weights, std::vector<EpochMetrics>* history) {
  test::TempDir dir;
  Calls calls;
  Process p(dir.path, 1);
  JobRunner runner(p.rt, quiet());
  Job job = p.job(calls);
  job.epoch_limiter(4);
  ASSERT_EQ(runner.run(job), 0);
  for (auto& w : p.model->parameters()) weights->push_back(w.detach().clone());
  *history = runner.history();
}

TEST_F(JobRunnerTest, ThreeSigtermsThenResumesEndBitForBitEqualToAnUninterruptedRun) {
  std::vector<torch::Tensor> want;
  std::vector<EpochMetrics> want_history;
  run_uninterrupted(&want, &want_history);
  ASSERT_EQ(want_history.size(), 4u);

  // Interrupted at step 3 (mid epoch 0), at step 10 (epoch 1's last step, before its epoch end),
  // and at the top of epoch 3 (its first step, 16, checkpoints); each restart is a new Runtime
  // and JobRunner on a model drawn from another seed.
  test::TempDir t;
  Calls calls;
  struct Leg {
    int64_t term_step, term_epoch;
    int rc;
    std::vector<std::pair<int64_t, int64_t>> epochs;  // this leg's epoch calls
    int64_t checkpoint_step, checkpoint_epoch;
  };
  const Leg legs[] = {
      {3, -1, kExitRequeue, {{0, 0}}, 3, 0},
      {10, -1, kExitRequeue, {{0, 3}, {1, 0}}, 10, 1},
      {-1, 3, kExitRequeue, {{1, 5}, {2, 0}, {3, 0}}, 16, 3},
      {-1, -1, 0, {{3, 1}}, 20, 4},
  };
  std::vector<torch::Tensor> got;
  std::vector<EpochMetrics> got_history;
  for (size_t i = 0; i < std::size(legs); ++i) {
    SCOPED_TRACE("leg " + std::to_string(i));
    PauseGate::instance().reset_for_test();  // a new process
    calls.epochs.clear();
    Process p(t.path, i == 0 ? 1 : 100 + i);  // a fresh start draws what the reference drew
    JobRunner runner(p.rt, quiet());
    Job job = p.job(calls, legs[i].term_step, legs[i].term_epoch);
    job.epoch_limiter(4);
    EXPECT_EQ(runner.run(job), legs[i].rc);
    EXPECT_EQ(calls.epochs, legs[i].epochs);
    Manifest m = latest_manifest(t.path);
    EXPECT_EQ(m.step, legs[i].checkpoint_step);
    EXPECT_EQ(m.epoch, legs[i].checkpoint_epoch);
    if (i + 1 == std::size(legs)) {
      for (auto& w : p.model->parameters()) got.push_back(w.detach().clone());
      got_history = runner.history();
    }
  }
  EXPECT_EQ(calls.init, 1);
  EXPECT_EQ(calls.exit, 1);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << "parameter " << i;
  ASSERT_EQ(got_history.size(), want_history.size());
  for (size_t e = 0; e < got_history.size(); ++e) {
    EXPECT_TRUE(got_history[e] == want_history[e])
        << "epoch " << e << " loss mean " << got_history[e].metrics.at("loss").mean() << " vs "
        << want_history[e].metrics.at("loss").mean();
    EXPECT_EQ(got_history[e].metrics.at("loss").count, kStepsPerEpoch);
  }
}

TEST_F(JobRunnerTest, TheReducerMakesTheHistory) {
  test::TempDir t;
  Calls calls;
  Process p(t.path, 1);
  JobRunner runner(p.rt, quiet());
  int reduced = 0;
  runner.reduce_metrics_with([&](const MetricsTracker& m) {
    ++reduced;
    MetricsTracker twice = m;
    EXPECT_TRUE(twice.merge(m).ok());
    return twice;
  });
  Job job = p.job(calls);
  job.epoch_limiter(2);
  ASSERT_EQ(runner.run(job), 0);
  EXPECT_EQ(reduced, 2);
  EXPECT_EQ(runner.history()[1].metrics.at("loss").count, 2 * kStepsPerEpoch);
}

using test::error_of;

TEST_F(JobRunnerTest, MisuseThrowsNamingTheCall) {
  test::TempDir t;
  Calls calls;
  Process p(t.path, 1);
  JobRunner runner(p.rt, quiet());
  Job none = p.job(calls);
  EXPECT_EQ(error_of([&] { runner.run(none); }),
            "hydro: invalid argument: the Job has no stop condition: call epoch_limiter(n) or stop_when(...)");
  Job empty;
  empty.epoch_limiter(1);
  EXPECT_EQ(error_of([&] { runner.run(empty); }),
            "hydro: invalid argument: Job::epoch is not set: it runs one epoch's steps");
  EXPECT_EQ(error_of([&] { empty.epoch_limiter(-1); }),
            "hydro: invalid argument: Job::epoch_limiter(-1): must be >= 0");
  EXPECT_EQ(error_of([&] { JobRunner second(p.rt, quiet()); }),
            "hydro: invalid argument: track(): 'hydro_job' is tracked twice");
  Job skips;
  skips.epoch_limiter(1);
  skips.epoch = [](int64_t, JobContext& ctx) { ctx.step_end(2); };
  EXPECT_EQ(error_of([&] { runner.run(skips); }),
            "hydro: invalid argument: JobContext::step_end(2) in epoch 0: expected 1, the steps done in this epoch "
            "(epoch_step() + 1)");
  EXPECT_EQ(error_of([&] { runner.run(skips); }),
            "hydro: invalid argument: JobRunner::run() runs one job: make a new Runtime and JobRunner");
}

// Two ranks in this process, over one HashStore, with join_gloo_group's collectives.
std::vector<std::shared_ptr<Group>> two_ranks() {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::shared_ptr<Group>> groups(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto g = std::make_shared<Group>();
      g->env.rank = r;
      g->env.world_size = 2;
      g->env.master_addr = "127.0.0.1";
      g->store = store;
      g->pg = gloo_backend(*g, std::chrono::seconds(30));
      groups[r] = g;
    });
  for (auto& t : threads) t.join();
  return groups;
}

TEST(AllReduceMetrics, EveryRankGetsTheSameMergedStats) {
  auto groups = two_ranks();
  MetricsTracker local[2], out[2];
  local[0].add("loss", 1.0);
  local[0].add("loss", 2.0);
  local[1].add("loss", 10.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { out[r] = all_reduce_metrics(*groups[r], local[r]); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    const MetricStats& s = out[r].epoch_summary().at("loss");
    EXPECT_EQ(s.sum, 13.0);
    EXPECT_EQ(s.count, 3);
    EXPECT_EQ(s.min, 1.0);
    EXPECT_EQ(s.max, 10.0);
  }
}

TEST(AllReduceMetrics, DifferentNamesThrowOnEveryRankNamingBoth) {
  auto groups = two_ranks();
  MetricsTracker local[2];
  local[0].add("loss", 1.0);
  local[1].add("loss", 1.0);
  local[1].add("acc", 0.5);
  std::string err[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { err[r] = error_of([&] { all_reduce_metrics(*groups[r], local[r]); }); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(err[r],
              "hydro: all_reduce_metrics: rank 0 has the metrics {loss}, rank 1 has {acc, loss}: every rank "
              "must add() the same names in an epoch");
}

}  // namespace
}  // namespace hydro
