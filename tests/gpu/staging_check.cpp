// Issue 58 on a real device: a checkpoint's copies of device tensors (snapshot.h's TensorPool and
// DeviceCopies, cuda_staging.cpp) into pinned host memory. Checks every byte lands, a second save
// pins nothing new and sees the work queued before it, and prints the rate from the first copy
// queued to the last one done beside a plain pinned copy of the same bytes and libtorch's `.cpu()`
// (pageable), in the same run (the goal: at least 0.8 of the pinned).
//   hydro-staging-check [GIB [TENSORS]]   GIB of device tensors (default 4) in TENSORS (default 64)
// `--linked` only says it was built and loads (CI, which has no GPU).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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
