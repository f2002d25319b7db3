// The examples' weights digest: FNV-1a over every parameter's bytes, so equal digests mean
// bit-for-bit equal weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>

inline uint64_t weights_digest(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.parameters()) {
    torch::Tensor t = p.detach().contiguous().cpu();
    const auto* b = static_cast<const unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}
