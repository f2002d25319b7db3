// One checkpoint written by every rank of a job (HYDRO_CKPT_MODE=sync_any|sync_all), coordinated
// through a RankStore. Every rank calls the same methods in the same order (lock step).
//
// The vote (at each step end): every rank says whether it wants a checkpoint and whether it wants
// to exit; sync_any grants what ANY rank wants, sync_all only what ALL want. It also says whether
// a suspend checkpoint would fit its window (granted only when ALL say so) and whether it has a
// SIGTSTP and wants that checkpoint now (ANY, in both modes). One store add and one wait per rank.
//
// The save:
//   1. rank 0 creates the staging directory and publishes its name;
//   2. every rank writes its shard into staging/rank-R/, fsyncs every file and the shard's
//      directory, and publishes its file list (sizes, hashes) as durable;
//   3. the committer waits until EVERY rank's shard is durable, writes the manifest listing all
//      shards, renames the directory into place and moves `latest`; then it publishes the outcome,
//      which every rank waits for and returns. Only then does the committer prune old checkpoints
//      (to its `dir`'s keep_last; the runtime gives it 0 and prunes on a background thread of the
//      rank that committed_last()).
// A rank that dies or fails before step 2 ends leaves the others waiting at most `timeout`; the
// checkpoint is then not committed and `latest` does not move.
//
// A checkpoint directory that is not shared between nodes: a rank that cannot see rank 0's staging
// directory is on another node. The first such rank of each host creates a staging directory of the
// same name in its node's root and commits it for the ranks of its node, after the same "every shard
// is durable" barrier. Every node then holds a complete checkpoint of its own ranks' shards, and
// agree_on_resume() picks the newest step that every rank can load.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "hydro/checkpoint_dir.h"
#include "hydro/manifest.h"
#include "hydro/rank_store.h"
#include "hydro/settings.h"

namespace hydro {

struct GroupDecision {
  bool checkpoint = false;
  bool exit = false;
  // Every rank said its last step plus its last save fit the suspend window: a SIGTSTP after this
  // vote checkpoints before it pauses, on every rank alike (HYDRO_SUSPEND_CHECKPOINT=auto).
  bool suspend_checkpoint = false;
  // Some rank has a SIGTSTP pending and checkpoints before pausing: every rank checkpoints now
  // (then `checkpoint` is true too), whatever the mode.
  bool suspend_now = false;
};

// What a rank offers when the ranks agree where to resume.
struct ResumeOffer {
  std::set<int64_t> loadable;             // the steps of the checkpoints it can load (verified, with its shard)
  int64_t newest_seen = -1;               // the newest checkpoint of the job's world size it sees, its shard or not
  std::vector<std::string> newest_hosts;  // that checkpoint's host of each rank (Manifest::hosts)
};

// What every rank learns from all the offers (the same on every rank).
struct ResumeAgreement {
  int64_t step = -1;         // the newest step every rank can load; -1: none
  int64_t newest_seen = -1;  // the newest checkpoint any rank sees, and the hosts that wrote it
  std::vector<std::string> newest_hosts;
  std::vector<std::string> hosts;  // each rank's host now
};

// A rank's part of the suspend checkpoint in a vote.
struct SuspendVote {
  bool fits = false;  // its last step plus its last save fit the suspend window
  bool now = false;   // it has a SIGTSTP pending and wants the checkpoint before pausing
};

class CheckpointGroup {
 public:
  // `host` names this rank's machine (gethostname): the ranks of one host share a staging directory.
  // `space`: where its keys live in the store ("<space>/<round>/..."). Two groups of the same ranks
  // on one store, in two spaces, run their calls independently: an async save on its own thread and
  // connection (its own group) while the training thread votes in the other.
  CheckpointGroup(RankStore& store, int rank, int world_size, std::string host, std::chrono::milliseconds timeout,
                  std::string space = "hydro");

  Status vote(CheckpointMode mode, bool want_checkpoint, bool want_exit, GroupDecision* out,
              const SuspendVote& suspend = {});
  // Beyond this many ranks the vote carries no suspend fields: no suspend checkpoint.
  static constexpr int kMaxSuspendWorld = 6207;

  // Writes this rank's shard through `fill` (files go into rank-R/) and commits collectively. `dir`
  // is this rank's view of the root.
  // On success *out names the committed checkpoint (on every rank). `dcp_metadata`, if given: the
  // committer composes DCP's index (CheckpointWriter::compose_dcp_metadata) once every rank's shard
  // is durable, if every one is in its directory (not in one node's copy of a node-local root).
  Status save(CheckpointDir& dir, int64_t step, bool keep, int64_t epoch,
              const std::function<Status(CheckpointWriter&)>& fill, CheckpointInfo* out,
              const Composer* dcp_metadata = nullptr);

  // Every rank passes its offer; all get the same agreement: the newest step common to every
  // rank (or -1), the newest any rank sees and who wrote it, and where each rank runs now.
  Status agree_on_resume(const ResumeOffer& mine, ResumeAgreement* out);
  // The step alone.
  Status agree_on_resume(const std::set<int64_t>& loadable, int64_t* step);

  int rank() const { return rank_; }
  // This rank committed the last save(): the whole checkpoint, or its node's copy in a directory
  // that is not shared. Removing old checkpoints from its view of the root is then its task.
  bool committed_last() const { return committed_last_; }

  // Called by every rank as it finishes. Rank 0 serves the store, so it waits (up to `limit`, and
  // never longer than the group's timeout, after which every other wait takes a rank for dead)
  // until every rank has left: a rank still reading the last vote's result must not find the
  // store gone. Other ranks return at once. Returns Code::not_found if some rank never left.
  Status leave(std::chrono::milliseconds limit, int* missing);

  static std::string shard_dir(int rank) { return Manifest::shard_dir(rank); }

 private:
  void drop_previous_vote();
  RankStore& store_;
  const std::string space_;
  int rank_, world_;
  std::string host_;
  std::chrono::milliseconds timeout_;
  int64_t round_ = 0;  // one per collective call, the same on every rank
  int64_t last_vote_ = -1;
  bool committed_last_ = false;
};

}  // namespace hydro
