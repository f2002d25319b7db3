#include "hydro/sampler_order.h"

#include <algorithm>
#include <string>

namespace hydro {
namespace {

Status check_world(int64_t world, int64_t rank) {
  if (world < 1)
    return Status::invalid_argument("sampler: num_replicas=" + std::to_string(world) + " must be at least 1");
  if (rank < 0 || rank >= world)
    return Status::invalid_argument("sampler: rank=" + std::to_string(rank) +
                                    " must be in [0, num_replicas=" + std::to_string(world) + ")");
  return Status::OK();
}

}  // namespace

int64_t sampler_num_samples(int64_t n, int64_t world, bool drop_last) {
  if (n <= 0 || world < 1) return 0;
  return drop_last ? n / world : (n + world - 1) / world;
}

int64_t sampler_total_size(int64_t n, int64_t world, bool drop_last) {
  return sampler_num_samples(n, world, drop_last) * world;
}

int64_t sampler_max_consumed(int64_t n, int64_t world, bool drop_last) {
  if (n <= 0) return 0;
  return drop_last ? n : n + world - 1;
}

Status sampler_rank_order(const std::vector<int64_t>& perm, int64_t world, int64_t rank, bool drop_last,
                          std::vector<int64_t>* out) {
  return sampler_resume_order(perm, 0, world, world, rank, drop_last, out);
}

Status sampler_resume_order(const std::vector<int64_t>& perm, int64_t consumed, int64_t saved_world, int64_t world,
                            int64_t rank, bool drop_last, std::vector<int64_t>* out) {
  HYDRO_RETURN_IF_ERROR(check_world(world, rank));
  if (saved_world < 1)
    return Status::invalid_argument("sampler: the saved num_replicas=" + std::to_string(saved_world) +
                                    " must be at least 1");
  const int64_t n = static_cast<int64_t>(perm.size());
  const int64_t most = sampler_max_consumed(n, saved_world, drop_last);
  if (consumed < 0 || consumed > most)
    return Status::invalid_argument("sampler: consumed=" + std::to_string(consumed) + " is outside [0, " +
                                    std::to_string(most) + "] for " + std::to_string(n) + " samples on " +
                                    std::to_string(saved_world) + " rank(s)" + (drop_last ? " with drop_last" : ""));
  out->clear();
  const int64_t m = std::max<int64_t>(n - consumed, 0);
  const int64_t total = sampler_total_size(m, world, drop_last);
  out->reserve(static_cast<size_t>(total / world));
  for (int64_t j = rank; j < total; j += world) out->push_back(perm[static_cast<size_t>((consumed + j) % n)]);
  return Status::OK();
}

}  // namespace hydro
