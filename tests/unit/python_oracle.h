// Test support: runs Debian's /usr/bin/python3 with python3-torch, once, to print what PyTorch's
// own torch.utils.data.DistributedSampler yields, so the C++ samplers are checked against it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace hydro::test {

// Runs `/usr/bin/python3 -c script`; returns its exit status and stdout.
int run_python(const std::string& script, std::string* out);

// The message a test fails with when /usr/bin/python3 cannot import torch ("" when it can).
std::string python_torch_problem();

struct SamplerCase {
  int64_t n, world, rank;
  uint64_t seed;
  int64_t epoch;
  bool shuffle, drop_last;
  auto key() const { return std::tie(n, world, rank, seed, epoch, shuffle, drop_last); }
  bool operator<(const SamplerCase& o) const { return key() < o.key(); }
};

// The grid: these sizes (n < world, primes, above 256), world sizes 1..4 and every rank, these
// seeds, epochs 0..2, shuffle and drop_last both ways.
const std::vector<int64_t>& oracle_sizes();
const std::vector<uint64_t>& oracle_seeds();

// Every case of the grid and its index sequence from PyTorch, computed by one python run (cached).
// Empty, with `error` set, when python failed.
const std::map<SamplerCase, std::vector<size_t>>& distributed_sampler_oracle(std::string* error);

}  // namespace hydro::test
