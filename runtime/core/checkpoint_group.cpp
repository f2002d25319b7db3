#include "hydro/checkpoint_group.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <thread>

#include "group_link.h"
#include "group_message.h"
#include "hydro/hang_watch.h"
#include "hydro/manifest.h"

namespace hydro {
namespace {

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// A peer's file list names only files of its own shard: "rank-R/<name>", nothing that leads out.
bool inside_shard(const std::string& name, int rank) {
  return Manifest::valid_file_name(name) && Manifest::in_shard(name, rank);
}

// One collective save, as one rank runs it (see checkpoint_group.h for the steps).
class GroupSave {
 public:
  GroupSave(Link link, CheckpointDir& dir, int64_t step, int rank, int world, const std::string& host)
      : link_(std::move(link)),
        dir_(dir),
        step_(step),
        rank_(rank),
        world_(world),
        host_(host),
        what_("checkpoint of step " + std::to_string(step) + " not committed: "),
        hosts_(static_cast<size_t>(world), "") {
    hosts_[static_cast<size_t>(rank)] = host;
  }

  bool committer() const { return committer_ == rank_; }

  Status run(bool keep, int64_t epoch, const std::function<Status(CheckpointWriter&)>& fill, CheckpointInfo* out,
             const Composer* dcp_metadata) {
    HYDRO_RETURN_IF_ERROR(rank_ == 0 ? start_staging() : join_staging());
    Status s = write_shard(fill);
    if (committer_ != rank_) return s.ok() ? await_commit(out) : s;
    return commit(s, keep, epoch, out, dcp_metadata);
  }

 private:
  // Rank 0 makes the staging directory and tells the others its name.
  Status start_staging() {
    Status s = dir_.open(/*clean=*/true);
    if (s.ok()) s = dir_.begin(step_, &writer_);
    link_.publish("staging", s, s.ok() ? writer_->staging_name() : "");
    return s;
  }

  // Another rank: into rank 0's directory, or (not shared) one per node of the same name.
  Status join_staging() {
    nlohmann::json body;
    HYDRO_RETURN_IF_ERROR(link_.receive("staging", what_, rank_name(0), &body, "did not start it"));
    if (!body.is_string()) return Status::corruption(what_ + "rank 0 sent no staging name");
    const std::string name = body.get<std::string>();
    HYDRO_RETURN_IF_ERROR(dir_.open(/*clean=*/false));
    Status s = dir_.join(name, step_, &writer_);
    if (s.ok())
      s = find_node_committer();
    else if (s.code() == Code::not_found)
      s = stage_on_this_node(name);
    if (!s.ok()) link_.publish("durable/" + std::to_string(rank_), s);
    return s;
  }

  // Rank 0's directory, or one that another rank of this host made: it claimed the host in the
  // store before it made the directory, so the claim is visible by now.
  Status find_node_committer() {
    int64_t claims = 0;
    HYDRO_RETURN_IF_ERROR(link_.store().add(link_.key("leader/" + host_), 0, &claims));
    return claims > 0 ? receive_node_committer() : Status::OK();
  }

  // Rank 0's directory is not visible here: the first rank of this host makes one of the same name.
  Status stage_on_this_node(const std::string& name) {
    int64_t n = 0;
    HYDRO_RETURN_IF_ERROR(link_.store().add(link_.key("leader/" + host_), 1, &n));
    if (n != 1) {
      HYDRO_RETURN_IF_ERROR(receive_node_committer());
      return dir_.join(name, step_, &writer_);
    }
    committer_ = rank_;
    Status s = dir_.begin_named(name, step_, &writer_);
    link_.publish("ready/" + host_, s, rank_);
    return s;
  }

  Status receive_node_committer() {
    nlohmann::json body;
    const std::string from = "the rank that stages for host " + host_;
    HYDRO_RETURN_IF_ERROR(link_.receive("ready/" + host_, what_, from, &body, "did not make its staging directory"));
    int64_t c = 0;
    HYDRO_RETURN_IF_ERROR(body_int(body, from, &c));
    committer_ = static_cast<int>(c);
    return Status::OK();
  }

  // This rank's shard, durable before it says so.
  Status write_shard(const std::function<Status(CheckpointWriter&)>& fill) {
    Status s = writer_->set_subdir(CheckpointGroup::shard_dir(rank_));
    if (s.ok()) s = fill(*writer_);
    if (s.ok()) s = writer_->sync_subdir();
    link_.publish("durable/" + std::to_string(rank_), s,
                  s.ok() ? files_json(committer_, host_, writer_->files()) : nullptr);
    return s;
  }

  std::string outcome_key() const { return "committed/" + std::to_string(committer_); }

  Status await_commit(CheckpointInfo* out) {
    Status s = link_.receive(outcome_key(), what_, rank_name(committer_), nullptr, "did not report the commit");
    if (!s.ok() && s.code() != Code::durability_uncertain) return s;
    const std::string name = CheckpointDir::name_for(step_);
    if (out) *out = CheckpointInfo{name, dir_.root() + "/" + name, step_};
    return s;
  }

  // The committer: every shard of every rank durable, then one manifest and the rename.
  Status commit(Status s, bool keep, int64_t epoch, CheckpointInfo* out, const Composer* dcp_metadata) {
    if (s.ok()) s = take_shards();
    if (s.ok() && dcp_metadata && shards_here_ == world_) s = writer_->compose_dcp_metadata(*dcp_metadata);
    CheckpointInfo info;
    if (s.ok()) {
      writer_->add_files({}, true);
      writer_->set_world_size(world_);
      writer_->set_hosts(hosts_);
      writer_->set_keep(keep);
      writer_->set_epoch(epoch);
      writer_->defer_prune();
      s = writer_->commit(&info);
    } else if (s.code() == Code::durability_uncertain) {
      s = Status::io(s.message());  // a shard's, not a commit's: nothing was committed
    }
    link_.publish(outcome_key(), s);
    if (s.ok()) dir_.prune_after(info);  // every rank's old shards, once the peers are told
    if ((s.ok() || s.code() == Code::durability_uncertain) && out) *out = info;
    return s;
  }

  // Every other rank's shard, once durable, asked for in one request (not one per rank). A rank
  // that reported a failure is named before one that never reported.
  Status take_shards() {
    std::vector<std::optional<std::string>> texts;
    int missing = -1;
    HYDRO_RETURN_IF_ERROR(
        link_.gather("durable/", world_, rank_, what_ + "the ranks' shard reports", &texts, &missing));
    for (int r = 0; r < world_; ++r)
      if (texts[static_cast<size_t>(r)]) HYDRO_RETURN_IF_ERROR(take_shard(r, *texts[static_cast<size_t>(r)]));
    if (missing >= 0) return link_.expired(what_ + rank_name(missing) + " did not report its shard durable");
    return Status::OK();
  }

  // Rank r's shard report; its files go into the manifest when this rank commits them.
  Status take_shard(int r, const std::string& text) {
    nlohmann::json body;
    Status peer = Link::read(text, what_, rank_name(r), &body);
    if (peer.code() == Code::durability_uncertain)  // of a shard: a failure (a commit's is told as such)
      return Status::io(what_ + rank_name(r) + " failed: " + peer.message());
    HYDRO_RETURN_IF_ERROR(peer);
    int c = 0;
    std::vector<ManifestFile> files;
    if (!parse_files(body, &c, &hosts_[static_cast<size_t>(r)], &files))
      return Status::io(what_ + rank_name(r) + " sent a bad file list");
    for (const auto& f : files)
      if (!inside_shard(f.name, r))
        return Status::io(what_ + rank_name(r) + " listed a file outside its shard: '" + f.name + "'");
    if (c == rank_) {
      writer_->add_files(files, true);
      ++shards_here_;
    }
    return Status::OK();
  }

  Link link_;
  CheckpointDir& dir_;
  const int64_t step_;
  const int rank_, world_;
  const std::string host_, what_;
  std::unique_ptr<CheckpointWriter> writer_;
  int committer_ = 0;
  int shards_here_ = 1;             // the committer's: the shards in its staging directory, its own included
  std::vector<std::string> hosts_;  // each rank's, from its shard's message
};

}  // namespace

CheckpointGroup::CheckpointGroup(RankStore& store, int rank, int world_size, std::string host,
                                 std::chrono::milliseconds timeout, std::string space)
    : store_(store),
      space_(std::move(space)),
      rank_(rank),
      world_(world_size),
      host_(std::move(host)),
      timeout_(timeout) {}

Status CheckpointGroup::vote(CheckpointMode mode, bool want_checkpoint, bool want_exit, GroupDecision* out,
                             const SuspendVote& suspend) {
  Link link(store_, space_, ++round_, timeout_);
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
  HYDRO_RETURN_IF_ERROR(store_.add(link.key("vote"), delta, &tally));
  if (tally % b == world_) {
    link.publish("tally", Status::OK(), tally);
  } else {
    nlohmann::json body;
    HYDRO_RETURN_IF_ERROR(link.receive("tally", "the step-end vote did not complete: ", "the last voter", &body));
    HYDRO_RETURN_IF_ERROR(body_int(body, "the last voter", &tally));
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
  drop_previous_vote();
  return Status::OK();
}

// Every rank has read the previous vote's tally before adding to this one: rank 0 drops its keys.
void CheckpointGroup::drop_previous_vote() {
  if (rank_ == 0 && last_vote_ >= 0) {
    const std::string prev = space_ + "/" + std::to_string(last_vote_) + "/";
    (void)store_.remove(prev + "vote");
    (void)store_.remove(prev + "tally");
  }
  last_vote_ = round_;
}

Status CheckpointGroup::save(CheckpointDir& dir, int64_t step, bool keep, int64_t epoch,
                             const std::function<Status(CheckpointWriter&)>& fill, CheckpointInfo* out,
                             const Composer* dcp_metadata) {
  GroupSave one(Link(store_, space_, ++round_, timeout_), dir, step, rank_, world_, host_);
  Status s = one.run(keep, epoch, fill, out, dcp_metadata);
  committed_last_ = s.ok() && one.committer();
  return s;
}

Status CheckpointGroup::leave(std::chrono::milliseconds limit, int* missing) {
  int64_t left = 0;
  *missing = 0;
  HYDRO_RETURN_IF_ERROR(store_.add(space_ + "/left", 1, &left));
  if (rank_ != 0) return Status::OK();
  RunningDeadline deadline(std::min(limit, timeout_));
  while (left < world_) {
    if (deadline.passed()) {
      *missing = static_cast<int>(world_ - left);
      return Status::not_found(std::to_string(*missing) + " rank(s) did not finish");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    HYDRO_RETURN_IF_ERROR(store_.add(space_ + "/left", 0, &left));
  }
  return Status::OK();
}

Status CheckpointGroup::agree_on_resume(const std::set<int64_t>& loadable, int64_t* step) {
  ResumeAgreement a;
  HYDRO_RETURN_IF_ERROR(agree_on_resume(ResumeOffer{loadable, -1, {}}, &a));
  *step = a.step;
  return Status::OK();
}

Status CheckpointGroup::agree_on_resume(const ResumeOffer& mine, ResumeAgreement* out) {
  Link link(store_, space_, ++round_, timeout_);
  link.publish("loadable/" + std::to_string(rank_), Status::OK(), offer_json(mine, host_));
  std::vector<std::optional<std::string>> texts;
  int missing = -1;
  HYDRO_RETURN_IF_ERROR(link.gather("loadable/", world_, rank_, "resume", &texts, &missing));
  if (missing >= 0) return link.expired("resume: " + rank_name(missing) + " did not report");
  std::vector<ResumeOffer> offers(static_cast<size_t>(world_));
  ResumeAgreement a;
  a.hosts.assign(static_cast<size_t>(world_), "");
  for (int r = 0; r < world_; ++r) {
    auto& offer = offers[static_cast<size_t>(r)];
    if (r == rank_) {
      offer = mine;
      a.hosts[static_cast<size_t>(r)] = host_;
      continue;
    }
    nlohmann::json body;
    HYDRO_RETURN_IF_ERROR(Link::read(*texts[static_cast<size_t>(r)], "resume: ", rank_name(r), &body));
    if (!parse_offer(body, &offer, &a.hosts[static_cast<size_t>(r)]))
      return Status::corruption("resume: " + rank_name(r) + " sent a malformed list of steps");
  }
  std::set<int64_t> common = offers[0].loadable;
  for (const auto& offer : offers) {  // in rank order: the same result on every rank
    std::set<int64_t> both;
    std::set_intersection(common.begin(), common.end(), offer.loadable.begin(), offer.loadable.end(),
                          std::inserter(both, both.end()));
    common = std::move(both);
    if (offer.newest_seen > a.newest_seen) {
      a.newest_seen = offer.newest_seen;
      a.newest_hosts = offer.newest_hosts;
    }
  }
  a.step = common.empty() ? -1 : *common.rbegin();
  *out = std::move(a);
  return Status::OK();
}

}  // namespace hydro
