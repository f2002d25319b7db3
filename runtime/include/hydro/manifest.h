// A checkpoint's manifest.json: what it holds, with each file's size and xxh64.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hydro/status.h"

namespace hydro {

struct ManifestFile {
  std::string name;
  uint64_t size = 0;
  uint64_t xxh64 = 0;
};

struct Manifest {
  static constexpr const char* kFileName = "manifest.json";
  static constexpr const char* kFormat = "hydro-checkpoint/1";

  int64_t step = 0;
  int64_t epoch = 0;
  int world_size = 1;
  bool keep = false;     // force_save: never removed by keep_last
  bool sharded = false;  // every rank's state is in rank-R/ (sync modes with several ranks)
  // Commit order in its directory: one more than the newest there at commit (0: hydro before 0.x
  // wrote none). A job resumed from an older checkpoint commits lower steps after higher ones;
  // pruning and the fallback of latest_valid() go by this order, not by step.
  int64_t generation = 0;
  // The writing process's compute threads: ATen's intra-op pool and OpenBLAS's (0: not recorded).
  // BLAS and ATen split sums by thread count, so a resume with other counts may differ in the last
  // bits from a run never interrupted; the resume says so.
  int threads = 0;
  int blas_threads = 0;
  std::string hydro_version;
  // Sharded: the host each rank ran on when it wrote its shard, by rank (empty: not recorded).
  // With node-local directories a host holds only its own ranks' shards, so a resume on other
  // hosts can tell that a checkpoint it cannot load was not lost but left behind.
  std::vector<std::string> hosts;
  std::vector<ManifestFile> files;

  // Whether rank `rank`'s shard is in this checkpoint (always, when it is not sharded).
  bool holds_shard(int rank) const;
  // The directory of rank `rank`'s shard in a sharded checkpoint, and whether `name` lies in it.
  static std::string shard_dir(int rank) { return "rank-" + std::to_string(rank); }
  static bool in_shard(const std::string& name, int rank);

  std::string to_json() const;
  // The one hidden name a checkpoint may hold, at its top: torch.distributed.checkpoint's index of a
  // sharded state, which dcp.load reads under this name only (CheckpointWriter::compose_dcp_metadata).
  static constexpr const char* kDcpMetadata = ".metadata";
  // `where` names the file in error messages.
  static bool valid_file_name(const std::string& name);
  static Status parse(const std::string& text, const std::string& where, Manifest* out);
};

}  // namespace hydro
