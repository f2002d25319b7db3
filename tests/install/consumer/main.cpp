#include <hydro/runtime.h>

#include <cstdio>

int main() {
  torch::manual_seed(0);
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), 0.1);
  hydro::Runtime hydro;
  hydro.track("model", *model);
  hydro.track("optimizer", opt);
  int64_t step = hydro.resume();
  for (; step < 3;) {
    opt.zero_grad();
    model->forward(torch::randn({8, 4})).pow(2).mean().backward();
    opt.step();
    if (!hydro.step_end(++step)) return hydro::kExitRequeue;
  }
  std::printf("consumer: trained to step %lld\n", static_cast<long long>(step));
  return 0;
}
