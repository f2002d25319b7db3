// The libtorch glue's checkpoints beyond the basics: extras, force_save, atomic_save, async mode
// (the state as it was at save, a failure thrown later, the resume checkpoint kept for slower
// ranks). The suspend checkpoint: runtime_suspend_test.cpp.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "compute_threads.h"
#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/pause_gate.h"
#include "hydro/runtime.h"
#include "runtime_fixture.h"

namespace hydro {
namespace {

using test::eventually;
using test::make_model;
using test::RuntimeTest;
using test::same_bits;
using test::train_step;

}  // namespace
}  // namespace hydro

namespace hydro {
namespace {

TEST_F(RuntimeTest, ExtrasTensorsAndStringsAreSavedAndRestored) {
  test::TempDir dir;
  torch::Tensor ema = torch::arange(6, torch::kFloat).reshape({2, 3});
  std::string phase = "warmup";
  {
    Runtime rt(settings(dir.path + "/ck"));
    rt.track("ema", ema);
    rt.track("phase", phase);
    rt.save(4);
  }
  torch::Tensor saved = ema.clone();
  ema = torch::zeros({5});
  phase = "changed";
  Runtime rt(settings(dir.path + "/ck"));
  rt.track("ema", ema);
  rt.track("phase", phase);
  EXPECT_EQ(rt.resume(), 4);
  EXPECT_TRUE(same_bits(ema, saved));
  EXPECT_EQ(phase, "warmup");
}

TEST_F(RuntimeTest, ForceSaveIsKeptPastKeepLast) {
  test::TempDir dir;
  Settings s = settings(dir.path + "/ck");
  s.keep_last = 1;
  Runtime rt(s);
  auto model = make_model();
  rt.track("model", *model);
  rt.save(1);
  rt.save(2, /*keep_always=*/true);
  for (int step = 3; step <= 5; ++step) rt.save(step);
  rt.wait_idle();
  std::vector<int64_t> steps;
  for (const auto& c : CheckpointDir(dir.path + "/ck").list()) steps.push_back(c.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 5}));
}

TEST_F(RuntimeTest, AtomicSaveWritesWhatTorchLoadReadsAndLeavesNoTemporary) {
  test::TempDir dir;
  auto a = make_model();
  auto b = make_model();
  const std::string path = dir.path + "/model.pt";
  atomic_save(a, path);
  atomic_save(a, path);  // replaces it
  torch::load(b, path);
  for (size_t i = 0; i < a->parameters().size(); ++i) EXPECT_TRUE(same_bits(a->parameters()[i], b->parameters()[i]));
  std::vector<std::string> names;
  ASSERT_TRUE(posix_fs().list_dir(dir.path, &names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"model.pt"});
  try {
    atomic_save(a, dir.path + "/missing/model.pt");
    ADD_FAILURE() << "no error for a missing directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("create " + dir.path + "/missing/.model.pt.tmp-"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hydro

namespace hydro {
namespace {

torch::nn::Sequential make_bn_model() {
  return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::BatchNorm1d(32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 4));
}

std::vector<torch::Tensor> state_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  for (const auto& b : m.buffers()) out.push_back(b.detach().clone());
  return out;
}

// Async: save() copies the state and returns; training goes on while a background thread writes.
// The checkpoint holds the state as it was at save() (weights, BatchNorm buffers, Adam's moments),
// so resuming from it and training on gives the same bits as the run that never stopped.
TEST_F(RuntimeTest, AsyncSaveWritesTheStateAsItWasAtSaveWhileTrainingGoesOn) {
  for (bool adam : {true, false}) {
    test::TempDir t;
    Settings s = settings(t.path);
    s.mode = CheckpointMode::async;
    torch::manual_seed(3);
    auto a = make_bn_model();
    std::unique_ptr<torch::optim::Optimizer> opt_a;
    if (adam)
      opt_a = std::make_unique<torch::optim::Adam>(a->parameters(), torch::optim::AdamOptions(0.01));
    else
      opt_a = std::make_unique<torch::optim::SGD>(a->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    std::vector<torch::Tensor> after;
    {
      Runtime rt(s);
      rt.track("model", *a);
      rt.track("optimizer", *opt_a);
      for (int i = 0; i < 3; ++i) train_step(a, *opt_a);
      rt.set_epoch(7);
      EXPECT_EQ(rt.save(3), t.path + "/step-000000000003");
      for (int i = 0; i < 4; ++i) train_step(a, *opt_a);  // while the write may be in flight
      rt.wait_idle();
      after = state_of(*a);
    }
    torch::manual_seed(42);
    auto b = make_bn_model();
    std::unique_ptr<torch::optim::Optimizer> opt_b;
    if (adam)
      opt_b = std::make_unique<torch::optim::Adam>(b->parameters(), torch::optim::AdamOptions(0.01));
    else
      opt_b = std::make_unique<torch::optim::SGD>(b->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    Runtime rt(s);
    rt.track("model", *b);
    rt.track("optimizer", *opt_b);
    EXPECT_EQ(rt.resume(), 3);
    EXPECT_EQ(rt.epoch(), 7);
    for (int i = 0; i < 4; ++i) train_step(b, *opt_b);
    auto got = state_of(*b);
    ASSERT_EQ(got.size(), after.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(got[i], after[i])) << (adam ? "adam " : "sgd ") << i;
  }
}

TEST_F(RuntimeTest, AsyncTermWaitsForTheWriteInFlightThenCommitsItsOwn) {
  test::TempDir t;
  Settings s = settings(t.path);
  s.mode = CheckpointMode::async;
  Runtime rt(s);
  auto model = make_model();
  torch::Tensor extra = torch::randn({1000, 100});
  rt.track("model", *model);
  rt.track("extra", extra);
  rt.save(2);
  ::kill(::getpid(), SIGTERM);
  ASSERT_TRUE(eventually([] { return PauseGate::instance().exit_requested(); }));
  EXPECT_FALSE(rt.step_end(3));  // returns once step 3 is committed
  CheckpointDir dir(t.path);
  EXPECT_TRUE(dir.verify("step-000000000002").ok());
  EXPECT_TRUE(dir.verify("step-000000000003").ok());
  std::string latest;
  ASSERT_TRUE(posix_fs().read_link(t.path + "/latest", &latest).ok());
  EXPECT_EQ(latest, "step-000000000003");
}

TEST_F(RuntimeTest, ASamplersPositionIsSavedAndRestored) {
  test::TempDir t;
  for (auto mode : {CheckpointMode::sync_any, CheckpointMode::async}) {
    Settings s = settings(t.path + "/" + mode_name(mode));
    s.mode = mode;
    torch::data::samplers::SequentialSampler a(100);
    {
      Runtime rt(s);
      rt.track("sampler", a);
      a.next(30);
      rt.save(1);
      rt.wait_idle();
    }
    torch::data::samplers::SequentialSampler b(100);
    Runtime rt(s);
    rt.track("sampler", b);
    EXPECT_EQ(rt.resume(), 1);
    auto got = b.next(1);
    ASSERT_TRUE(got);
    EXPECT_EQ((*got)[0], 30u) << mode_name(mode);
  }
}

// Async mode with several ranks: rank 0 runs ahead without a vote, so it must not prune the
// checkpoint the ranks resumed from while the others may still be reading it.
TEST_F(RuntimeTest, AsyncRankZeroNeverPrunesTheCheckpointTheRanksResumedFrom) {
  test::TempDir t;
  Settings s = settings(t.path);
  s.mode = CheckpointMode::async;
  s.keep_last = 1;
  auto model = make_model();
  {
    Runtime rt(s);
    rt.track("model", *model);
    rt.save(5);
    rt.wait_idle();
  }
  s.world_size = 2;  // rank 0 of two
  Runtime rt(s);
  rt.track("model", *model);
  ASSERT_EQ(rt.resume(), 5);
  for (int step = 6; step <= 8; ++step) {
    rt.save(step);
    rt.wait_idle();
  }
  CheckpointDir dir(t.path);
  EXPECT_TRUE(dir.verify("step-000000000005").ok()) << "pruned while another rank may read it";
  EXPECT_TRUE(dir.verify("step-000000000008").ok());
  EXPECT_FALSE(posix_fs().exists(t.path + "/step-000000000006")) << "keep_last=1 still holds for the rest";
}

TEST_F(RuntimeTest, AFailedAsyncWriteIsThrownByTheNextSave) {
  test::TempDir t;
  { std::ofstream(t.path + "/file") << "x"; }
  Settings s = settings(t.path + "/file/ck");  // cannot be created: a file is in the way
  s.mode = CheckpointMode::async;
  Runtime rt(s);
  auto model = make_model();
  rt.track("model", *model);
  rt.save(1);  // returns at once; the write fails in the background
  try {
    rt.save(2);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("hydro: async checkpoint failed: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(t.path + "/file/ck"), std::string::npos) << e.what();
  }
}

// The Runtime's save goes through the filesystem it was given: a file fsync that fails is the
// save's error, and `latest` stays on the last checkpoint that was durable.
TEST_F(RuntimeTest, AFailedFsyncInTheSavePathIsAnErrorAndLatestStaysPut) {
  test::TempDir t;
  test::FaultFs fs;
  Runtime rt(settings(t.path), fs);
  auto model = make_model();
  rt.track("model", *model);
  rt.save(1);
  fs.fail_sync_at = fs.syncs;  // the next file fsync: the first of step 2
  try {
    rt.save(2);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
  }
  std::string latest;
  ASSERT_TRUE(posix_fs().read_link(t.path + "/latest", &latest).ok());
  EXPECT_EQ(latest, "step-000000000001");
  fs.fail_sync_at = -1;
  rt.save(3);
  ASSERT_TRUE(posix_fs().read_link(t.path + "/latest", &latest).ok());
  EXPECT_EQ(latest, "step-000000000003");
}

// A checkpoint of step_end (every N steps) that fails, as on a file system full for a moment (the
// soak test's), is a warning: training goes on, `latest` stays on the newest committed one, and
// the next is tried at its time. The third failure in a row fails the step.

}  // namespace
}  // namespace hydro

namespace hydro {
namespace {

// A checkpoint from a different model: the error names the file and the tensor, and both shapes.
TEST_F(RuntimeTest, ACheckpointOfADifferentModelNamesTheTensorAndBothShapes) {
  test::TempDir t;
  {
    auto model = make_model();  // Linear(8, 32), ReLU, Linear(32, 4)
    Runtime rt(settings(t.path));
    rt.track("model", *model);
    rt.save(1);
  }
  torch::nn::Sequential other(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 4));
  Runtime rt(settings(t.path));
  rt.track("model", *other);
  try {
    rt.resume();
    FAIL() << "resumed a checkpoint of another model";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "hydro: invalid argument: checkpoint " + t.path +
                  "/step-000000000001: model.pt: tensor '0.weight' "
                  "has shape [32, 8], the model's is [16, 8] (a checkpoint of a different model?)");
  }
}

// BLAS and ATen split sums by thread count: a resume with another count than the checkpoint's
// may differ in the last bits from a run never interrupted, and says so (once, at the resume).
TEST_F(RuntimeTest, AResumeWithAnotherThreadCountThanTheCheckpointsSaysSo) {
  test::TempDir dir;
  const int before = at::get_num_threads();
  auto model = make_model();
  at::set_num_threads(1);
  {
    Runtime rt(settings(dir.path + "/ck"));
    rt.track("model", *model);
    rt.save(3);
  }
  auto resumed_with = [&](int threads) {
    at::set_num_threads(threads);
    Runtime rt(settings(dir.path + "/ck"));
    rt.track("model", *model);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(rt.resume(), 3);
    return ::testing::internal::GetCapturedStderr();
  };
  const std::string other = resumed_with(2);
  const std::string same = resumed_with(1);
  at::set_num_threads(before);
  EXPECT_NE(other.find("ATen's threads 1 then, 2 now"), std::string::npos) << other;
  EXPECT_NE(other.find("torch.set_num_threads(1)"), std::string::npos) << other;
  EXPECT_EQ(same.find("other thread counts"), std::string::npos) << same;
}

// Whether this process has OpenBLAS loaded (/proc/self/maps).
bool openblas_loaded() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libopenblas") != std::string::npos) return true;
  return false;
}

// Debian's libtorch (1.13) sums through OpenBLAS, whose pool at::set_num_threads leaves alone: its
// count is found and recorded too, and the warning names each pool whose count changed. pip's
// torch sums through MKL and OpenMP, which ATen's count covers: nothing more is recorded there.
TEST(ComputeThreads, OpenBlasIsFoundAndEachChangedPoolIsNamed) {
#if TORCH_VERSION_MAJOR < 2
  ASSERT_TRUE(openblas_loaded()) << "Debian's libtorch should sum through OpenBLAS (libopenblas0-pthread)";
#endif
  if (openblas_loaded())
    EXPECT_GT(compute_threads().blas, 0) << "OpenBLAS's thread count was not found in this process";
  else
    EXPECT_EQ(compute_threads().blas, 0) << "no OpenBLAS in this process, yet a count was found";
  EXPECT_EQ(compute_threads_note({2, 4}, {2, 4}), "");
  EXPECT_EQ(compute_threads_note({0, 0}, {2, 4}), "") << "a checkpoint that recorded nothing";
  const std::string blas = compute_threads_note({2, 4}, {2, 1});
  EXPECT_NE(blas.find("OpenBLAS's threads 4 then, 1 now"), std::string::npos) << blas;
  EXPECT_EQ(blas.find("ATen's threads"), std::string::npos) << blas;
  EXPECT_NE(blas.find("OPENBLAS_NUM_THREADS=4"), std::string::npos) << blas;
}

}  // namespace
}  // namespace hydro
