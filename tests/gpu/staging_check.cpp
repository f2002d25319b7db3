// Issue 58 on a real device: the staging of device tensors (runtime/torch/cuda_staging.h,
// hydro/staging.h) into pinned slots. Checks every byte lands, a second save pins nothing new, and
// prints the rate from the stage to the last slot ready beside a plain pinned copy of the same
// bytes and libtorch's `.cpu()` (pageable), in the same run (the goal: at least 0.8 of the pinned).
//   hydro-staging-check [GIB [TENSORS]]   GIB of device tensors (default 4) in TENSORS (default 64)
// `--linked` only says it was built and loads (CI, which has no GPU).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_staging.h"

namespace {

using Clock = std::chrono::steady_clock;
int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One save: stage, then each slot made ready in order, as a writer would; seconds, or -1.
double save(hydro::CudaStaging& staging, const std::vector<at::Tensor>& tensors, std::vector<at::Tensor>* host) {
  const auto start = Clock::now();
  hydro::Status s = staging.stage(tensors, host);
  for (size_t i = 0; s.ok() && i < host->size(); ++i) s = staging.ready((*host)[i].data_ptr(), (*host)[i].nbytes());
  if (!s.ok()) std::printf("staging: %s\n", s.message().c_str());
  return s.ok() ? since(start) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--linked") {
    std::printf("hydro-staging-check: built, loads\n");
    return 0;
  }
  const double gib = argc > 1 ? std::atof(argv[1]) : 4;
  const int count = argc > 2 ? std::atoi(argv[2]) : 64;
  const int64_t each = static_cast<int64_t>(gib * (1ull << 30) / count / 4);
  std::vector<at::Tensor> tensors;
  for (int i = 0; i < count; ++i) tensors.push_back(torch::randn({each}, torch::kCUDA));
  torch::cuda::synchronize();
  std::vector<std::string> logs;
  hydro::CudaStaging staging([&logs](const std::string& l) { logs.push_back(l); });
  std::vector<at::Tensor> host;
  const double first = save(staging, tensors, &host);
  bool same = first >= 0;
  for (size_t i = 0; same && i < host.size(); ++i) same = torch::equal(host[i], tensors[i].cpu());
  check(same, "every tensor's bytes in its slot");
  check(staging.pinned(), "the slots are pinned");
  for (auto& t : tensors) t.mul_(2);  // a later save sees the new values, after the work that made them
  const double second = save(staging, tensors, &host);
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
  for (const auto& l : logs) std::printf("log: %s\n", l.c_str());
  return failures ? 1 : 0;
}
