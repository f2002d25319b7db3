// Which sample files of a folder each rank reads (hydro/sharded_dataset.h loads them), in the
// manner of cycling_utils' DistributedShardedDataset. No libtorch.
//
// The names are sorted (bytewise), so every rank computes the same split from its own listing.
// Each rank owns a contiguous block of floor(files / world) names: rank r owns names
// [r * share, (r + 1) * share); the last files % world names belong to no rank, so that every
// rank has the same number of samples (data-parallel ranks must step in lockstep).
// samples_pct_per_replica (0 < pct <= 100) keeps the first floor(share * pct / 100) names of the
// block, at least one. The blocks are disjoint for any pct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hydro/status.h"

namespace hydro {

struct ShardSpec {
  int64_t world = 1;  // num_replicas
  int64_t rank = 0;
  double samples_pct_per_replica = 100;
};

// `folder` only names the folder in error messages. Errors (invalid argument):
//   "sharded dataset: folder 'F' holds no sample files"
//   "sharded dataset: 3 ranks but only 2 sample files in 'F': each rank needs at least one file"
//   "sharded dataset: samples_pct_per_replica=0 must be in (0, 100]"
//   "sharded dataset: rank=2 must be in [0, num_replicas=2)" (and num_replicas below 1)
Status shard_split(const std::string& folder, std::vector<std::string> names, const ShardSpec& spec,
                   std::vector<std::string>* out);

}  // namespace hydro
