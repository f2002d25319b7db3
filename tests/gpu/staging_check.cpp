// Issue 58 on a real device: a checkpoint's copies of device tensors (snapshot.h's TensorPool and
// DeviceCopies, cuda_staging.cpp) into pinned host memory. Checks every byte lands, a second save
// pins nothing new and sees the work queued before it, and prints the rate from the first copy
// queued to the last one done beside a plain pinned copy of the same bytes and libtorch's `.cpu()`
// (pageable), in the same run (the goal: at least 0.8 of the pinned). First, a C++ job's model and
// AdamW saved (sync_any, async) and resumed: back on the device, in the memory each parameter had,
// bit for bit.
//   hydro-staging-check [GIB [TENSORS]]   GIB of device tensors (default 4) in TENSORS (default 64)
// `--linked` only says it was built and loads (CI, which has no GPU).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "hydro/runtime.h"
#include "snapshot.h"

namespace {

using Clock = std::chrono::steady_clock;
int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One save's copies, as a capture makes them: each queued, then all waited for; seconds, or -1.
double save(hydro::TensorPool& pool, const std::vector<at::Tensor>& tensors, std::vector<at::Tensor>* host) {
  const auto start = Clock::now();
  try {
    host->clear();
    for (size_t i = 0; i < tensors.size(); ++i) host->push_back(pool.copy("t" + std::to_string(i), tensors[i]));
    pool.finish();
  } catch (const std::exception& e) {
    std::printf("staging: %s\n", e.what());
    return -1;
  }
  return since(start);
}

torch::nn::Sequential make_model() {
  torch::nn::Sequential m(torch::nn::Linear(512, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 10));
  m->to(torch::kCUDA);
  return m;
}

void train_step(torch::nn::Sequential& m, torch::optim::Optimizer& o) {
  o.zero_grad();
  m->forward(torch::randn({64, 512}, torch::kCUDA)).pow(2).mean().backward();
  o.step();
}

// A C++ job's model and AdamW on the device, saved in `mode` (its copies staged) and resumed into
// fresh ones: back on the device, bit for bit, and a step runs.
void resume_round_trip(hydro::CheckpointMode mode, const std::string& name) {
  char tmpl[] = "/tmp/hydro-staging-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  torch::manual_seed(1);
  auto model = make_model();
  torch::optim::AdamW opt(model->parameters());
  train_step(model, opt);
  hydro::Settings s;
  s.checkpoint_dir = dir + "/ck";
  s.keep_last = 0;
  s.mode = mode;
  {
    hydro::Runtime rt(s);
    rt.track("model", *model);
    rt.track("opt", opt);
    rt.save(1);
    rt.wait_idle();
  }
  auto fresh = make_model();
  torch::optim::AdamW fresh_opt(fresh->parameters());
  train_step(fresh, fresh_opt);  // other weights and states, to be replaced
  std::vector<const void*> memory;
  for (const auto& p : fresh->parameters()) memory.push_back(p.data_ptr());
  {
    hydro::Runtime rt(s);
    rt.track("model", *fresh);
    rt.track("opt", fresh_opt);
    rt.resume();
  }
  bool same = true, on_device = true, kept = true;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    same = same && torch::equal(model->parameters()[i].cpu(), fresh->parameters()[i].cpu());
    on_device = on_device && fresh->parameters()[i].is_cuda();
    kept = kept && fresh->parameters()[i].data_ptr() == memory[i];
  }
  for (auto& [key, state] : fresh_opt.state())
    hydro::for_each_state_tensor(*state, [&](const std::string&, const torch::Tensor& t) {
      on_device = on_device && (!t.defined() || t.is_cuda());
      return t;
    });
  check(same, name + ": the resumed model is the saved one, bit for bit");
  check(on_device, name + ": its parameters and optimizer state are back on the device");
  check(kept, name + ": each parameter back in the device memory it had (copied from its pinned slot)");
  try {
    torch::manual_seed(7);
    train_step(model, opt);
    torch::manual_seed(7);
    train_step(fresh, fresh_opt);
    torch::cuda::synchronize();
    bool stepped_same = true;
    for (size_t i = 0; i < model->parameters().size(); ++i)
      stepped_same = stepped_same && torch::equal(model->parameters()[i].cpu(), fresh->parameters()[i].cpu());
    check(stepped_same, name + ": a step after the resume is the saved job's step, bit for bit (AdamW's state too)");
  } catch (const std::exception& e) {
    check(false, name + ": a step after the resume: " + e.what());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--linked") {
    std::printf("hydro-staging-check: built, loads\n");
    return 0;
  }
  resume_round_trip(hydro::CheckpointMode::sync_any, "sync_any");
  resume_round_trip(hydro::CheckpointMode::async, "async");
  const double gib = argc > 1 ? std::atof(argv[1]) : 4;
  const int count = argc > 2 ? std::atoi(argv[2]) : 64;
  const int64_t each = static_cast<int64_t>(gib * (1ull << 30) / count / 4);
  std::vector<at::Tensor> tensors;
  for (int i = 0; i < count; ++i) tensors.push_back(torch::randn({each}, torch::kCUDA));
  torch::cuda::synchronize();
  hydro::TensorPool pool;
  std::vector<at::Tensor> host;
  const double first = save(pool, tensors, &host);
  bool same = first >= 0;
  for (size_t i = 0; same && i < host.size(); ++i) same = torch::equal(host[i], tensors[i].cpu());
  check(same, "every tensor's bytes in its slot");
  check(host[0].is_pinned(), "the slots are pinned");
  for (auto& t : tensors) t.mul_(2);  // a later save sees the new values, after the work that made them
  const void* before = host[0].data_ptr();
  const double second = save(pool, tensors, &host);
  check(host[0].data_ptr() == before, "a second save reuses the slots");
  check(second >= 0 && torch::equal(host[0], tensors[0].cpu()), "a second save copies after the work before it");
  at::Tensor all = torch::cat(tensors),
             pinned = torch::empty({all.numel()}, torch::dtype(torch::kFloat).pinned_memory(true));
  torch::cuda::synchronize();
  auto start = Clock::now();
  pinned.copy_(all, /*non_blocking=*/true);
  torch::cuda::synchronize();
  const double raw = since(start);
  start = Clock::now();
  at::Tensor pageable = all.cpu();
  const double cpu = since(start);
  const double bytes_gib = static_cast<double>(all.nbytes()) / (1ull << 30);
  std::printf(
      "FIGURE staging gib=%.2f tensors=%d first_s=%.3f second_s=%.3f staged_gibs=%.2f pinned_copy_gibs=%.2f "
      "cpu_gibs=%.2f ratio=%.2f\n",
      bytes_gib, count, first, second, bytes_gib / second, bytes_gib / raw, bytes_gib / cpu, raw / second);
  return failures ? 1 : 0;
}
