// A dataset over a folder of sample files, one sample a file, of which each rank reads only its
// own shard (hydro/shard_split.h: sorted names, a contiguous block of equal size per rank,
// samples_pct_per_replica of it).
//
// File format: what torch::save writes, of either
//   a tensor                                    -> Example{data, undefined target}, or
//   std::vector<torch::Tensor>{data, target}    -> Example{data, target}.
// Files and folders whose names start with '.' and subfolders are ignored. Files are read at
// get(), so a large folder costs nothing up front.
//
//   hydro::ShardedFileDataset data("/data/train", {world, rank});
//   hydro::InterruptibleSampler sampler(data.size().value(), seed);   // indices into this shard
//   auto loader = torch::data::make_data_loader(data.map(torch::data::transforms::Stack<>()), sampler, 32);
//
// Errors throw std::runtime_error naming the folder or file: a missing or empty folder, more ranks
// than files, samples_pct_per_replica outside (0, 100], a file torch::load cannot read.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "hydro/shard_split.h"

namespace hydro {

class ShardedFileDataset : public torch::data::datasets::Dataset<ShardedFileDataset> {
 public:
  ShardedFileDataset(std::string folder, ShardSpec spec = {});

  torch::data::Example<> get(size_t index) override;
  torch::optional<size_t> size() const override { return files_.size(); }

  // This rank's files, full paths, in the order get() indexes them.
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::vector<std::string> files_;
};

}  // namespace hydro
