#include "hydro/checkpoint_group.h"

#include "hydro/manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <cinttypes>
#include <cstdio>
#include <thread>

namespace hydro {
namespace {

// A value that reports a failure to the other ranks starts with '!'.
std::string failure(const Status& s) { return "!" + s.message(); }
bool is_failure(const std::string& v) { return !v.empty() && v[0] == '!'; }

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

std::string files_json(int committer, const std::vector<ManifestFile>& files) {
  nlohmann::json j;
  j["committer"] = committer;
  j["files"] = nlohmann::json::array();
  for (const auto& f : files) j["files"].push_back({f.name, f.size, f.xxh64});
  return j.dump();
}

bool parse_files(const std::string& text, int* committer, std::vector<ManifestFile>* files) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return false;
  try {
    *committer = j.at("committer").get<int>();
    for (const auto& f : j.at("files")) files->push_back({f.at(0).get<std::string>(), f.at(1).get<uint64_t>(), f.at(2).get<uint64_t>()});
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

// A peer's file list names only files of its own shard: "rank-R/<name>", nothing that leads out.
bool inside_shard(const std::string& name, int rank) {
  const std::string dir = CheckpointGroup::shard_dir(rank) + "/";
  return Manifest::valid_file_name(name) && name.compare(0, dir.size(), dir) == 0;
}

}  // namespace

CheckpointGroup::CheckpointGroup(RankStore& store, int rank, int world_size, std::string host,
                                 std::chrono::milliseconds timeout)
    : store_(store), rank_(rank), world_(world_size), host_(std::move(host)), timeout_(timeout) {}

std::string CheckpointGroup::key(const std::string& k) const { return "hydro/" + std::to_string(round_) + "/" + k; }

Status CheckpointGroup::wait(const std::string& k, const std::string& what, std::string* value) {
  Status s = store_.get(key(k), timeout_, value);
  if (s.code() == Code::not_found)
    return Status::io(what + " within " + std::to_string(timeout_.count() / 1000) +
                      " s (HYDRO_STORE_TIMEOUT): a rank died, hung or is paused too long");
  if (!s.ok()) return Status::io(what + ": " + s.message());
  return Status::OK();
}

Status CheckpointGroup::vote(CheckpointMode mode, bool want_checkpoint, bool want_exit, GroupDecision* out,
                             const SuspendVote& suspend) {
  ++round_;
  // One counter holds the whole tally, in base B = world + 1: voters, ranks asking to checkpoint,
  // ranks asking to exit, ranks whose suspend checkpoint fits, ranks asking for one now. The last
  // voter publishes it. B^5 must stay below 2^63: past kMaxSuspendWorld ranks the suspend fields
  // are left out (B^3 holds up to 2 million ranks).
  const int64_t b = world_ + 1;
  const bool with_suspend = world_ <= kMaxSuspendWorld;
  const int64_t b3 = b * b * b;
  int64_t delta = 1 + b * (want_checkpoint || want_exit ? 1 : 0) + b * b * (want_exit ? 1 : 0);
  if (with_suspend) delta += b3 * (suspend.fits ? 1 : 0) + b3 * b * (suspend.now ? 1 : 0);
  int64_t tally = 0;
  HYDRO_RETURN_IF_ERROR(store_.add(key("vote"), delta, &tally));
  if (tally % b == world_) {
    HYDRO_RETURN_IF_ERROR(store_.set(key("tally"), std::to_string(tally)));
  } else {
    std::string v;
    HYDRO_RETURN_IF_ERROR(wait("tally", "the step-end vote did not complete", &v));
    tally = std::strtoll(v.c_str(), nullptr, 10);
  }
  const int64_t asks = (tally / b) % b, exits = (tally / (b * b)) % b;
  const int64_t fits = with_suspend ? (tally / b3) % b : 0, now = with_suspend ? tally / (b3 * b) : 0;
  if (mode == CheckpointMode::sync_all) {
    out->checkpoint = asks == world_;
    out->exit = exits == world_;
  } else {
    out->checkpoint = asks > 0;
    out->exit = exits > 0;
  }
  // A suspend is the whole job's: one rank that has its SIGTSTP is enough, in either mode.
  out->suspend_now = now > 0;
  if (out->suspend_now) out->checkpoint = true;
  out->suspend_checkpoint = fits == world_;
  // Every rank has read the previous vote's tally before adding to this one: drop its keys.
  if (rank_ == 0 && last_vote_ >= 0) {
    const std::string prev = "hydro/" + std::to_string(last_vote_) + "/";
    (void)store_.remove(prev + "vote");
    (void)store_.remove(prev + "tally");
  }
  last_vote_ = round_;
  return Status::OK();
}

Status CheckpointGroup::save(CheckpointDir& dir, int64_t step, bool keep, int64_t epoch,
                             const std::function<Status(CheckpointWriter&)>& fill, CheckpointInfo* out) {
  ++round_;
  const std::string what = "checkpoint of step " + std::to_string(step) + " not committed: ";
  std::unique_ptr<CheckpointWriter> writer;
  int committer = 0;
  std::string v;

  // 1. The staging directory: rank 0's, or (not shared) one per node of the same name.
  if (rank_ == 0) {
    Status s = dir.open(/*clean=*/true);
    if (s.ok()) s = dir.begin(step, &writer);
    (void)store_.set(key("staging"), s.ok() ? base_name(writer->staging()) : failure(s));
    if (!s.ok()) return s;
  } else {
    HYDRO_RETURN_IF_ERROR(wait("staging", what + "rank 0 did not start it", &v));
    if (is_failure(v)) return Status::io(what + "rank 0 failed: " + v.substr(1));
    HYDRO_RETURN_IF_ERROR(dir.open(/*clean=*/false));
    Status s = dir.join(v, step, &writer);
    if (s.ok()) {
      // Rank 0's directory, or one that another rank of this host made (it claimed the host in the
      // store before it made the directory, so the claim is visible by now).
      int64_t claims = 0;
      HYDRO_RETURN_IF_ERROR(store_.add(key("leader/" + host_), 0, &claims));
      if (claims > 0) {
        std::string ready;
        HYDRO_RETURN_IF_ERROR(wait("ready/" + host_, what + "no rank of host " + host_ + " made its staging directory", &ready));
        if (is_failure(ready)) return Status::io(what + ready.substr(1));
        committer = std::atoi(ready.c_str());
      }
    } else if (s.code() == Code::not_found) {
      int64_t n = 0;
      HYDRO_RETURN_IF_ERROR(store_.add(key("leader/" + host_), 1, &n));
      if (n == 1) {
        committer = rank_;
        s = dir.begin_named(v, step, &writer);
        (void)store_.set(key("ready/" + host_), s.ok() ? std::to_string(rank_) : failure(s));
      } else {
        std::string ready;
        HYDRO_RETURN_IF_ERROR(wait("ready/" + host_, what + "no rank of host " + host_ + " made its staging directory", &ready));
        if (is_failure(ready)) return Status::io(what + ready.substr(1));
        committer = std::atoi(ready.c_str());
        s = dir.join(v, step, &writer);
      }
    }
    if (!s.ok()) {
      (void)store_.set(key("durable/" + std::to_string(rank_)), failure(s));
      return s;
    }
  }

  // 2. This rank's shard, durable before it says so.
  Status s = writer->set_subdir(shard_dir(rank_));
  if (s.ok()) s = fill(*writer);
  if (s.ok()) s = writer->sync_subdir();
  (void)store_.set(key("durable/" + std::to_string(rank_)), s.ok() ? files_json(committer, writer->files()) : failure(s));
  const bool commits = committer == rank_;
  const std::string outcome_key = "committed/" + std::to_string(committer);
  if (!commits) {
    if (!s.ok()) return s;
    HYDRO_RETURN_IF_ERROR(wait(outcome_key, what + "rank " + std::to_string(committer) + " did not report the commit", &v));
    if (is_failure(v)) return Status::io(what + v.substr(1));
    if (out) *out = CheckpointInfo{CheckpointDir::name_for(step), dir.root() + "/" + CheckpointDir::name_for(step), step};
    if (v[0] == '~') return Status::durability_uncertain(v.substr(1));
    return Status::OK();
  }

  // 3. The committer: every shard of every rank durable, then one manifest and the rename.
  for (int r = 0; r < world_ && s.ok(); ++r) {
    if (r == rank_) continue;
    s = wait("durable/" + std::to_string(r), what + "rank " + std::to_string(r) + " did not report its shard durable", &v);
    if (s.ok() && is_failure(v)) s = Status::io(what + "rank " + std::to_string(r) + " failed: " + v.substr(1));
    int c = 0;
    std::vector<ManifestFile> files;
    if (s.ok() && !parse_files(v, &c, &files)) s = Status::io(what + "rank " + std::to_string(r) + " sent a bad file list");
    for (const auto& f : files)
      if (s.ok() && !inside_shard(f.name, r))
        s = Status::io(what + "rank " + std::to_string(r) + " listed a file outside its shard: '" + f.name + "'");
    if (s.ok() && c == rank_) writer->add_files(files, true);
  }
  CheckpointInfo info;
  if (s.ok()) {
    writer->add_files({}, true);
    writer->set_world_size(world_);
    writer->set_keep(keep);
    writer->set_epoch(epoch);
    s = writer->commit(&info);
  }
  (void)store_.set(key(outcome_key), s.ok() ? "ok" : s.code() == Code::durability_uncertain ? "~" + s.message() : failure(s));
  if (s.ok() || s.code() == Code::durability_uncertain) {
    if (out) *out = info;
  }
  return s;
}

Status CheckpointGroup::leave(std::chrono::milliseconds limit, int* missing) {
  int64_t left = 0;
  *missing = 0;
  HYDRO_RETURN_IF_ERROR(store_.add("hydro/left", 1, &left));
  if (rank_ != 0) return Status::OK();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (left < world_) {
    if (std::chrono::steady_clock::now() >= deadline) {
      *missing = static_cast<int>(world_ - left);
      return Status::not_found(std::to_string(*missing) + " rank(s) did not finish");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    HYDRO_RETURN_IF_ERROR(store_.add("hydro/left", 0, &left));
  }
  return Status::OK();
}

Status CheckpointGroup::agree_on_resume(const std::set<int64_t>& loadable, int64_t* step) {
  ++round_;
  std::string mine;
  for (int64_t s : loadable) mine += std::to_string(s) + ",";
  HYDRO_RETURN_IF_ERROR(store_.set(key("loadable/" + std::to_string(rank_)), mine));
  std::set<int64_t> common = loadable;
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    std::string v;
    HYDRO_RETURN_IF_ERROR(wait("loadable/" + std::to_string(r), "resume: rank " + std::to_string(r) + " did not report its checkpoints", &v));
    std::set<int64_t> theirs;
    for (size_t p = 0; p < v.size();) {
      size_t comma = v.find(',', p);
      if (comma == std::string::npos) break;
      theirs.insert(std::strtoll(v.c_str() + p, nullptr, 10));
      p = comma + 1;
    }
    std::set<int64_t> both;
    std::set_intersection(common.begin(), common.end(), theirs.begin(), theirs.end(), std::inserter(both, both.end()));
    common = std::move(both);
  }
  *step = common.empty() ? -1 : *common.rbegin();
  return Status::OK();
}

}  // namespace hydro
