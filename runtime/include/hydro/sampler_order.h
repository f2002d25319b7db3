// The index arithmetic of PyTorch's torch.utils.data.DistributedSampler, given the epoch's order
// (a permutation of 0..n-1, or 0..n-1 itself without shuffle), and how an epoch interrupted by
// a checkpoint continues on a different number of ranks. No libtorch: hydro/sampler.h makes the
// permutation (torch.randperm) and hands it here.
//
// One epoch, W ranks (PyTorch's rule):
//   num_samples = floor(n / W) with drop_last, else ceil(n / W); total_size = num_samples * W.
//   Global position p (0 <= p < total_size) is perm[p % n]: without drop_last the padding repeats
//   the order from its start, wrapping as often as needed when the padding exceeds n.
//   Rank r takes positions r, r + W, r + 2W, ...
//
// Resuming: `consumed` counts the samples that all ranks together took this epoch (every rank
// takes the same number in data-parallel training). The remaining m = max(n - consumed, 0)
// samples are laid out for the new world W' with the same rule (floor(m / W') with drop_last,
// else ceil(m / W') per rank); remaining position j is perm[(consumed + j) % n], so padding
// wraps to the start of the epoch's order; rank r takes j = r, r + W', ... With W' == W and
// `consumed` a multiple of W this is exactly the rest of PyTorch's sequence for every rank.
#pragma once

#include <cstdint>
#include <vector>

#include "hydro/status.h"

namespace hydro {

// Samples per rank and for all ranks together in one epoch of n samples on `world` ranks.
int64_t sampler_num_samples(int64_t n, int64_t world, bool drop_last);
int64_t sampler_total_size(int64_t n, int64_t world, bool drop_last);

// The most samples `world` ranks can take in one epoch, whatever world size it started with:
// n with drop_last, else n + world - 1 (the padding is always below one sample per rank).
int64_t sampler_max_consumed(int64_t n, int64_t world, bool drop_last);

// The indices rank `rank` of `world` takes in a whole epoch: PyTorch's DistributedSampler.
Status sampler_rank_order(const std::vector<int64_t>& perm, int64_t world, int64_t rank, bool drop_last,
                          std::vector<int64_t>* out);

// The indices rank `rank` of `world` takes for the rest of an epoch of which `consumed` samples
// were taken by `saved_world` ranks (the rule above). Fails when consumed is negative or above
// sampler_max_consumed(n, saved_world, drop_last), or on a bad rank or world size.
Status sampler_resume_order(const std::vector<int64_t>& perm, int64_t consumed, int64_t saved_world, int64_t world,
                            int64_t rank, bool drop_last, std::vector<int64_t>* out);

}  // namespace hydro
