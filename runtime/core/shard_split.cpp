#include "hydro/shard_split.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace hydro {
namespace {

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

Status shard_split(const std::string& folder, std::vector<std::string> names, const ShardSpec& spec,
                   std::vector<std::string>* out) {
  if (spec.world < 1)
    return Status::invalid_argument("sharded dataset: num_replicas=" + std::to_string(spec.world) +
                                    " must be at least 1");
  if (spec.rank < 0 || spec.rank >= spec.world)
    return Status::invalid_argument("sharded dataset: rank=" + std::to_string(spec.rank) +
                                    " must be in [0, num_replicas=" + std::to_string(spec.world) + ")");
  const double pct = spec.samples_pct_per_replica;
  if (!(pct > 0 && pct <= 100))  // also rejects NaN
    return Status::invalid_argument("sharded dataset: samples_pct_per_replica=" + number(pct) + " must be in (0, 100]");
  if (names.empty()) return Status::invalid_argument("sharded dataset: folder '" + folder + "' holds no sample files");
  const int64_t files = static_cast<int64_t>(names.size());
  if (spec.world > files)
    return Status::invalid_argument("sharded dataset: " + std::to_string(spec.world) + " ranks but only " +
                                    std::to_string(files) + " sample file" + (files == 1 ? "" : "s") + " in '" +
                                    folder + "': each rank needs at least one file");
  std::sort(names.begin(), names.end());
  const int64_t share = files / spec.world;
  const int64_t keep = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(share) * pct / 100)));
  const auto first = names.begin() + spec.rank * share;
  out->assign(first, first + keep);
  return Status::OK();
}

}  // namespace hydro
