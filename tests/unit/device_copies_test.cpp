// Issue 58: a checkpoint's copies of device tensors (snapshot.h's DeviceCopies and TensorPool),
// through the Runtime's sync and async saves and its resume, over a CPU stand-in for the device
// (stand_in_device.h: no GPU is in CI). The CUDA calls themselves run in scripts/gpu-check.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fault_fs.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/runtime.h"
#include "runtime_fixture.h"
#include "snapshot.h"
#include "stand_in_device.h"
#include "tracked.h"

namespace hydro {
namespace {

using test::same_bits;
using test::StandInDevice;

class DeviceCopiesTest : public test::RuntimeTest {
 protected:
  void SetUp() override {
    test::RuntimeTest::SetUp();
    set_device_calls_for_tests([this] { return device.calls(); });
  }
  void TearDown() override {
    set_device_calls_for_tests(nullptr);
    test::RuntimeTest::TearDown();
  }
  // A model and AdamW on the stand-in's device (doubles), one step taken: 4 parameters, 8 states.
  void train() {
    torch::manual_seed(3);
    model->to(torch::kDouble);
    opt = std::make_unique<torch::optim::AdamW>(model->parameters());
    torch::Tensor loss = model->forward(torch::randn({16, 8}, torch::kDouble)).pow(2).mean();
    loss.backward();
    opt->step();
  }
  // One sync save of the model alone, at step 1.
  void save_model_once(const std::string& dir) {
    Runtime rt(settings(dir));
    rt.track("model", *model);
    rt.save(1);
  }
  // One sync save of the model and its AdamW, at step 1.
  void save_model_and_opt_once(const std::string& dir) {
    Runtime rt(settings(dir));
    rt.track("model", *model);
    rt.track("opt", *opt);
    rt.save(1);
  }
  // The model as the newest checkpoint under `dir` holds it.
  torch::nn::Sequential resumed(const std::string& dir) {
    auto fresh = test::make_model();
    fresh->to(torch::kDouble);
    Runtime rt(settings(dir));
    rt.track("model", *fresh);
    EXPECT_GE(rt.resume(), 0);
    return fresh;
  }
  bool same_model(const torch::nn::Sequential& a, const torch::nn::Sequential& b) {
    for (size_t i = 0; i < a->parameters().size(); ++i)
      if (!same_bits(a->parameters()[i], b->parameters()[i])) return false;
    return true;
  }
  // Whether the newest checkpoint under `dir` holds the model as it is, bit for bit.
  bool resumes_to_the_model(const std::string& dir) { return same_model(model, resumed(dir)); }

  StandInDevice device;
  torch::nn::Sequential model = test::make_model();
  std::unique_ptr<torch::optim::AdamW> opt;
};

constexpr int kDeviceTensors = 4 + 8;  // parameters, and AdamW's exp_avg and exp_avg_sq of each

TEST_F(DeviceCopiesTest, ASyncSaveQueuesEveryCopyWaitsForThemAndWritesTheirBytes) {
  test::TempDir dir;
  train();
  {
    Runtime rt(settings(dir.path + "/ck"));
    rt.track("model", *model);
    rt.track("opt", *opt);
    rt.save(1);
    EXPECT_EQ(device.queued, kDeviceTensors);
    EXPECT_EQ(device.waited, kDeviceTensors);
    EXPECT_EQ(device.pins, kDeviceTensors) << "host memory for each copy, pinned";
    rt.save(2);
    EXPECT_EQ(device.pins, kDeviceTensors) << "and reused by the next save";
    EXPECT_EQ(device.queued, 2 * kDeviceTensors);
  }
  EXPECT_TRUE(resumes_to_the_model(dir.path + "/ck")) << "no NaN of a copy not yet made, bit for bit";
}

TEST_F(DeviceCopiesTest, AnAsyncSaveStagesTheSameWay) {
  test::TempDir dir;
  train();
  Settings s = settings(dir.path + "/ck");
  s.mode = CheckpointMode::async;
  std::vector<torch::Tensor> at_save;
  {
    Runtime rt(s);
    rt.track("model", *model);
    rt.track("opt", *opt);
    rt.save(1);
    EXPECT_EQ(device.waited, kDeviceTensors) << "the copies are made before training goes on";
    for (const auto& p : model->parameters()) at_save.push_back(p.clone());
    model->parameters()[0].data().add_(1);  // training goes on: the checkpoint holds the state at save
    rt.wait_idle();
  }
  auto back = resumed(dir.path + "/ck");
  for (size_t i = 0; i < at_save.size(); ++i) EXPECT_TRUE(same_bits(at_save[i], back->parameters()[i])) << i;
}

TEST_F(DeviceCopiesTest, HostMemoryThatCannotBePinnedIsPageableAndTheSaveTheSame) {
  test::TempDir dir;
  train();
  device.fail_pin = true;
  save_model_once(dir.path + "/ck");
  EXPECT_EQ(device.pins, 0);
  EXPECT_EQ(device.queued, 4) << "the copies still go through the device's stream";
  EXPECT_TRUE(resumes_to_the_model(dir.path + "/ck"));
}

TEST_F(DeviceCopiesTest, ACopyThatFailsFailsTheSaveByItsFileAndTheNextSaveWorks) {
  test::TempDir dir;
  train();
  device.fail_wait = 1;
  Runtime rt(settings(dir.path + "/ck"));
  rt.track("model", *model);
  try {
    rt.save(1);
    ADD_FAILURE() << "the save went on with a copy that failed";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.pt"), std::string::npos) << what;
    EXPECT_NE(what.find("device tensor 1"), std::string::npos) << what;
    EXPECT_NE(what.find("illegal memory access"), std::string::npos) << what;
  }
  EXPECT_TRUE(CheckpointDir(dir.path + "/ck").list().empty()) << "no checkpoint of a failed copy";
  rt.save(2);
  ASSERT_EQ(CheckpointDir(dir.path + "/ck").list().size(), 1u);
}

TEST_F(DeviceCopiesTest, WithNoDeviceASyncSaveIsTorchsOwn) {
  test::TempDir dir;
  train();
  device.present = false;
  save_model_once(dir.path + "/ck");
  EXPECT_EQ(device.queued, 0);
  EXPECT_TRUE(resumes_to_the_model(dir.path + "/ck"));
}

TEST_F(DeviceCopiesTest, AQueueThatThrowsFailsTheSaveAndTheNextStartsAfresh) {
  test::TempDir dir;
  train();
  device.throw_queue = 2;
  {
    Runtime rt(settings(dir.path + "/ck"));
    rt.track("model", *model);
    EXPECT_THROW(rt.save(1), std::exception);
    rt.save(2);  // afresh: each copy into its own slot
  }
  EXPECT_TRUE(resumes_to_the_model(dir.path + "/ck"));
}

// One more AdamW step of `m` and `o` on the same batch as any other's.
void step(torch::nn::Sequential& m, torch::optim::AdamW& o) {
  torch::manual_seed(5);
  o.zero_grad();
  m->forward(torch::randn({16, 8}, torch::kDouble)).pow(2).mean().backward();
  o.step();
}

TEST_F(DeviceCopiesTest, AResumeCopiesEachDeviceTensorFromAPinnedSlotThatTheNextSaveReuses) {
  test::TempDir dir;
  train();
  save_model_and_opt_once(dir.path + "/ck");
  auto fresh = test::make_model();
  fresh->to(torch::kDouble);
  torch::optim::AdamW fresh_opt(fresh->parameters());
  std::vector<void*> memory;
  for (const auto& p : fresh->parameters()) memory.push_back(p.data_ptr());
  const int pins = device.pins, queued = device.queued, waited = device.waited;
  Runtime rt(settings(dir.path + "/ck"));
  rt.track("model", *fresh);
  rt.track("opt", fresh_opt);
  ASSERT_EQ(rt.resume(), 1);
  EXPECT_EQ(device.queued - queued, kDeviceTensors) << "each tensor's copy queued on the device's stream";
  EXPECT_EQ(device.waited - waited, kDeviceTensors);
  EXPECT_EQ(device.pins - pins, kDeviceTensors) << "from host memory pinned for it";
  for (size_t i = 0; i < memory.size(); ++i)
    EXPECT_EQ(fresh->parameters()[i].data_ptr(), memory[i]) << "parameter " << i << " back in its own memory";
  EXPECT_TRUE(same_model(model, fresh)) << "no NaN of a copy not yet made, bit for bit";
  step(model, *opt);
  step(fresh, fresh_opt);
  EXPECT_TRUE(same_model(model, fresh)) << "the optimizer's state restored too";
  rt.save(2);
  EXPECT_EQ(device.pins - pins, kDeviceTensors) << "the save copies into the slots the resume pinned";
}

TEST_F(DeviceCopiesTest, AResumeWhoseCopyFailsNamesTheFileAndTheError) {
  test::TempDir dir;
  train();
  save_model_once(dir.path + "/ck");
  device.fail_wait = 1;
  auto fresh = test::make_model();
  fresh->to(torch::kDouble);
  Runtime rt(settings(dir.path + "/ck"));
  rt.track("model", *fresh);
  try {
    rt.resume();
    ADD_FAILURE() << "the resume went on with a copy that failed";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.pt"), std::string::npos) << what;
    EXPECT_NE(what.find("illegal memory access"), std::string::npos) << what;
  }
}

TEST_F(DeviceCopiesTest, OnlyWhatCopiesTensorByTensorIsStagedAndSparseTensorsGoTorchsWay) {
  torch::optim::LBFGS lbfgs(model->parameters());
  torch::Tensor t = torch::ones({2}, torch::kDouble);
  EXPECT_TRUE(module_item("m", *model).stages);
  EXPECT_TRUE(tensor_item("t", t).stages);
  EXPECT_FALSE(optimizer_item("o", lbfgs).stages) << "serialized whole: a sync save streams it instead";
  test::TempDir dir;
  torch::Tensor sparse = torch::eye(3, torch::kDouble).to_sparse(), back;
  {
    Runtime rt(settings(dir.path + "/ck"));
    rt.track("sparse", sparse);
    rt.save(1);
  }
  EXPECT_EQ(device.queued, 0);
  Runtime rt(settings(dir.path + "/ck"));
  rt.track("sparse", back);  // not yet defined: the resume assigns it
  EXPECT_EQ(rt.resume(), 1);
  EXPECT_TRUE(back.defined() && torch::equal(back.to_dense(), sparse.to_dense()));
}

}  // namespace
}  // namespace hydro
