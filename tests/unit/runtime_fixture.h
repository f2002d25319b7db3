// Shared by the runtime's test files: a small model, a training step, a bit-exact comparison, and
// the fixture that resets the process-wide pause gate around each test.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "hydro/pause_gate.h"
#include "hydro/runtime.h"

namespace hydro::test {

inline torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Linear(32, 4));
}

inline void train_step(torch::nn::Sequential& model, torch::optim::Optimizer& opt) {
  torch::Tensor x = torch::randn({16, 8});
  opt.zero_grad();
  torch::Tensor loss = model->forward(x).pow(2).mean();
  loss.backward();
  opt.step();
}

inline bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { PauseGate::instance().reset_for_test(); }
  void TearDown() override { PauseGate::instance().reset_for_test(); }
  Settings settings(const std::string& dir = "") {
    Settings s;
    s.checkpoint_dir = dir;
    s.keep_last = 0;
    return s;
  }
};

}  // namespace hydro::test
