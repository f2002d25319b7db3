#include "hydro/resume_choice.h"

#include <sys/stat.h>

#include <cerrno>
#include <optional>
#include <set>

#include "hydro/checkpoint_dir.h"
#include "dir_safety.h"

namespace hydro {
namespace {

// A root that does not exist holds nothing to load; one that does must be the job's own.
Status check_if_present(const std::string& root) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0 && errno == ENOENT) return Status::OK();
  return check_root_trusted(root);
}

// "/ck/step-000000000500/" -> {"/ck", "step-000000000500"}
std::pair<std::string, std::string> split_checkpoint_path(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

Status chosen_by_launcher(Fs& fs, const std::string& resume_from, ResumeChoice* out) {
  auto [root, name] = split_checkpoint_path(resume_from);
  HYDRO_RETURN_IF_ERROR(check_root_trusted(root));
  HYDRO_RETURN_IF_ERROR(CheckpointDir(root, fs).verify(name, &out->manifest));
  out->path = resume_from;
  return Status::OK();
}

Status newest_valid(Fs& fs, const std::string& root, const std::function<void(const std::string&)>& log,
                    ResumeChoice* out) {
  HYDRO_RETURN_IF_ERROR(check_if_present(root));
  CheckpointDir dir(root, fs);
  std::optional<CheckpointInfo> found;  // verified by latest_valid()
  std::vector<std::string> warnings;
  Status st = dir.latest_valid(&found, &warnings);
  for (const auto& w : warnings) log("warning: " + w);
  HYDRO_RETURN_IF_ERROR(st);
  if (!found) return Status::OK();
  // Verified just now: read only the manifest, so that a resume reads the state twice (hash, load).
  HYDRO_RETURN_IF_ERROR(dir.read_manifest(found->name, &out->manifest));
  out->path = found->path;
  return Status::OK();
}

bool holds_every_shard(const Manifest& m) {
  if (m.world_size < 1) return false;
  for (int r = 0; r < m.world_size; ++r)
    if (!m.holds_shard(r)) return false;
  return true;
}

// This rank's offer: the checkpoints in `dir` it can load (verified, its own shard in them), and the
// newest of the job's world size it sees at all. With `reshard`, one of another number of ranks N
// is loadable where it holds every rank's shard (a directory every node shares): a resharded
// state reads them all. `other_size_newest`: the newest of another number of ranks.
Status offer_of(CheckpointDir& dir, const Settings& s, int rank, bool reshard,
                const std::function<void(const std::string&)>& log, ResumeOffer* offer, Manifest* other_size_newest) {
  std::vector<CheckpointInfo> committed;
  HYDRO_RETURN_IF_ERROR(dir.list(&committed));
  for (const auto& c : committed) {
    // Of the job's number of ranks, each rank checks its own shard (the agreement needs every
    // rank's); of another, a resharded state reads every shard, so each rank checks them all.
    Manifest m;
    Status v = dir.read_manifest(c.name, &m);
    const bool other_size = v.ok() && m.sharded && m.world_size != s.world_size;
    if (v.ok() && (!other_size || reshard)) v = dir.verify(c.name, &m, other_size ? -1 : rank);
    if (!v.ok()) {
      log("warning: " + v.message());
      continue;
    }
    if (other_size) {
      if (reshard && holds_every_shard(m)) offer->loadable.insert(c.step);
      if (m.step > other_size_newest->step) *other_size_newest = m;
      continue;
    }
    if (m.holds_shard(rank)) offer->loadable.insert(c.step);
    if (m.sharded && c.step > offer->newest_seen) {
      offer->newest_seen = c.step;
      offer->newest_hosts = m.hosts;
    }
  }
  return Status::OK();
}

std::string step_text(int64_t step) {
  return step < 0 ? std::string("step 0 (no checkpoint every rank has)") : "step " + std::to_string(step);
}

// A newer checkpoint than the agreed one that some rank sees, written with ranks on other hosts than
// now: node-local directories the job left behind on the hosts it ran on before. Resuming from an
// older step would silently lose the steps since.
Status check_not_left_behind(const ResumeAgreement& a) {
  if (a.newest_seen <= a.step || a.newest_hosts.size() != a.hosts.size()) return Status::OK();
  for (size_t r = 0; r < a.hosts.size(); ++r) {
    if (a.newest_hosts[r] == a.hosts[r]) continue;
    return Status::not_found(
        "resume: the checkpoint of step " + std::to_string(a.newest_seen) + " cannot be loaded by every rank: rank " +
        std::to_string(r) + " wrote its shard on host " + a.newest_hosts[r] + " and runs on " + a.hosts[r] +
        " now, which does not have it (node-local checkpoint directories stay on the hosts the job ran on). "
        "Resuming from " +
        step_text(a.step) +
        " would lose the steps since, so hydro stops. Run the job on the "
        "hosts it ran on (sbatch --nodelist), or keep checkpoints in a directory every node shares; to start "
        "over on purpose, move the checkpoints out of HYDRO_CKPT_DIR");
  }
  return Status::OK();
}

Status agreed_by_group(Fs& fs, const Settings& s, CheckpointGroup& group, bool reshard,
                       const std::function<void(const std::string&)>& log, ResumeChoice* out) {
  // hydro-launch sets both; without HYDRO_CKPT_DIR, its choice's directory is this rank's root.
  const std::string root = !s.checkpoint_dir.empty() ? s.checkpoint_dir : split_checkpoint_path(s.resume_from).first;
  HYDRO_RETURN_IF_ERROR(check_if_present(root));
  CheckpointDir dir(root, fs);
  ResumeOffer offer;
  Manifest other_size;  // the newest checkpoint of another number of ranks
  other_size.step = -1;
  HYDRO_RETURN_IF_ERROR(offer_of(dir, s, group.rank(), reshard, log, &offer, &other_size));
  ResumeAgreement a;
  HYDRO_RETURN_IF_ERROR(group.agree_on_resume(offer, &a));
  HYDRO_RETURN_IF_ERROR(check_not_left_behind(a));
  if (!reshard && other_size.step > a.step)
    return Status::invalid_argument(
        "resume: the checkpoint of step " + std::to_string(other_size.step) + " in " + dir.root() +
        " has the shards of " + std::to_string(other_size.world_size) + " ranks, this job has " +
        std::to_string(s.world_size) + ", and its state cannot be resharded. Resuming from " + step_text(a.step) +
        " would lose the steps since, so hydro stops: resume with " + std::to_string(other_size.world_size) +
        " ranks, or move the checkpoints out of HYDRO_CKPT_DIR to start over on purpose");
  const int64_t agreed = a.step;
  const std::set<int64_t>& loadable = offer.loadable;
  const int64_t newest = loadable.empty() ? -1 : *loadable.rbegin();
  if (agreed != newest)
    log("this rank's newest loadable checkpoint is " +
        (newest < 0 ? std::string("none") : "step " + std::to_string(newest)) +
        ", but not every rank can load it: the ranks resume together from " + step_text(agreed));
  if (agreed < 0) return Status::OK();
  const std::string name = CheckpointDir::name_for(agreed);
  HYDRO_RETURN_IF_ERROR(dir.read_manifest(name, &out->manifest));  // verified just above
  out->path = dir.root() + "/" + name;
  return Status::OK();
}

}  // namespace

Status choose_resume(Fs& fs, const Settings& settings, CheckpointGroup* group,
                     const std::function<void(const std::string&)>& log, ResumeChoice* out, bool reshard) {
  *out = ResumeChoice{};
  if (group && (!settings.checkpoint_dir.empty() || !settings.resume_from.empty()))
    return agreed_by_group(fs, settings, *group, reshard, log, out);
  if (!settings.resume_from.empty()) return chosen_by_launcher(fs, settings.resume_from, out);
  if (!settings.checkpoint_dir.empty()) return newest_valid(fs, settings.checkpoint_dir, log, out);
  return Status::OK();
}

Status rank_files(Fs& fs, const std::string& path, std::vector<std::string>* out) {
  *out = {path};
  const size_t file_at = path.rfind('/');  // STEP_DIR/SHARD/NAME
  const size_t shard_at = file_at == std::string::npos || file_at == 0 ? file_at : path.rfind('/', file_at - 1);
  if (shard_at == std::string::npos || file_at == 0) return Status::OK();
  const std::string step_dir = path.substr(0, shard_at), shard = path.substr(shard_at + 1, file_at - shard_at - 1);
  const size_t step_at = step_dir.rfind('/');
  const std::string step_name = step_at == std::string::npos ? step_dir : step_dir.substr(step_at + 1);
  int64_t step = 0;
  if (!CheckpointDir::parse_name(step_name, &step)) return Status::OK();  // not a file of a checkpoint's shard
  Manifest m;
  HYDRO_RETURN_IF_ERROR(
      CheckpointDir(step_at == std::string::npos ? "." : step_dir.substr(0, step_at), fs).read_manifest(step_name, &m));
  bool in_a_shard = false;
  for (int r = 0; m.sharded && r < m.world_size && !in_a_shard; ++r) in_a_shard = shard == Manifest::shard_dir(r);
  if (!in_a_shard) return Status::OK();
  out->clear();
  for (int r = 0; r < m.world_size; ++r) out->push_back(step_dir + "/" + Manifest::shard_dir(r) + path.substr(file_at));
  return Status::OK();
}

}  // namespace hydro
