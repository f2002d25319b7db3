#include "hydro/checkpoint_dir.h"

#include "dir_safety.h"
#include "hydro/log.h"
#include "hydro/version.h"

#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cinttypes>
#include <cstdio>

namespace hydro {
namespace {

constexpr const char* kStagingPrefix = ".tmp-";
constexpr const char* kLinkPrefix = ".latest-";

std::string parent_of(const std::string& path) { return path.substr(0, std::max<size_t>(1, path.find_last_of('/'))); }

// mkdir -p, durably: each directory made is fsynced into its parent, or a power loss could take
// the root away with every checkpoint committed in it.
Status make_dirs_durably(Fs& fs, const std::string& root) {
  std::vector<std::string> missing;
  for (std::string d = root; d.size() > 1 && !fs.exists(d); d = parent_of(d)) missing.push_back(d);
  HYDRO_RETURN_IF_ERROR(fs.make_dirs(root, 0700));
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) HYDRO_RETURN_IF_ERROR(fs.sync_dir(parent_of(*it)));
  return Status::OK();
}

}  // namespace

std::string CheckpointDir::name_for(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%012" PRId64, step);
  return buf;
}

// "step-" and 12 digits, more from step 10^12 on (found by fuzz.checkpoint_name: such a step's
// checkpoint, a count of samples or tokens say, was committed and then never seen). Only the name
// name_for gives the step: "step-0000000000042" is not a checkpoint's.
bool CheckpointDir::parse_name(const std::string& name, int64_t* step) {
  if (name.size() < 17 || name.size() > 24 || name.compare(0, 5, "step-") != 0) return false;
  if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  errno = 0;
  const long long v = std::strtoll(name.c_str() + 5, nullptr, 10);
  if (errno == ERANGE || name_for(v) != name) return false;
  *step = v;
  return true;
}

CheckpointDir::CheckpointDir(std::string root, Fs& fs, int keep_last)
    : root_(std::move(root)), fs_(fs), keep_last_(keep_last) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

Status CheckpointDir::open(bool clean) {
  if (root_.empty() || root_[0] != '/')
    return Status::invalid_argument("checkpoint directory must be an absolute path, got '" + root_ + "'");
  HYDRO_RETURN_IF_ERROR(make_dirs_durably(fs_, root_));
  HYDRO_RETURN_IF_ERROR(check_root_trusted(root_));
  if (!clean) return Status::OK();
  std::vector<std::string> names;
  Status s = fs_.list_dir(root_, &names);
  if (s.code() == Code::not_found) return Status::OK();  // no directory yet: no checkpoints
  HYDRO_RETURN_IF_ERROR(s);
  for (const auto& n : names) {
    bool ours = n.rfind(kStagingPrefix, 0) == 0 || n.rfind(kLinkPrefix, 0) == 0;
    if (ours && !writer_alive(root_, n)) HYDRO_RETURN_IF_ERROR(fs_.remove_tree(root_ + "/" + n));
  }
  return Status::OK();
}

Status CheckpointDir::begin(int64_t step, std::unique_ptr<CheckpointWriter>* out) {
  if (step < 0) return Status::invalid_argument("checkpoint step must be >= 0");
  std::string staging = root_ + "/" + kStagingPrefix + name_for(step) + private_suffix();
  HYDRO_RETURN_IF_ERROR(fs_.make_dir(staging, 0700));
  out->reset(new CheckpointWriter(this, staging, step, /*owner=*/true));
  return Status::OK();
}

namespace {
bool valid_staging_name(const std::string& name) {
  return name.rfind(kStagingPrefix, 0) == 0 && name.find('/') == std::string::npos &&
         name.find("..") == std::string::npos;
}
}  // namespace

Status CheckpointDir::join(const std::string& staging_name, int64_t step, std::unique_ptr<CheckpointWriter>* out) {
  if (!valid_staging_name(staging_name)) return Status::invalid_argument("bad staging name '" + staging_name + "'");
  const std::string staging = root_ + "/" + staging_name;
  if (!fs_.exists(staging)) return Status::not_found(staging + " does not exist");
  out->reset(new CheckpointWriter(this, staging, step, /*owner=*/false));
  return Status::OK();
}

Status CheckpointDir::begin_named(const std::string& staging_name, int64_t step,
                                  std::unique_ptr<CheckpointWriter>* out) {
  if (!valid_staging_name(staging_name)) return Status::invalid_argument("bad staging name '" + staging_name + "'");
  const std::string staging = root_ + "/" + staging_name;
  HYDRO_RETURN_IF_ERROR(fs_.make_dir(staging, 0700));
  out->reset(new CheckpointWriter(this, staging, step, /*owner=*/true));
  return Status::OK();
}

CheckpointWriter::CheckpointWriter(CheckpointDir* dir, std::string staging, int64_t step, bool owner)
    : dir_(dir), staging_(std::move(staging)), owner_(owner) {
  manifest_.step = step;
  manifest_.hydro_version = version();
}

CheckpointWriter::~CheckpointWriter() {
  if (!done_ && owner_) (void)dir_->fs_.remove_tree(staging_);
}

Status CheckpointWriter::set_subdir(const std::string& sub) {
  if (!Manifest::valid_file_name(sub) || sub.find('/') != std::string::npos)
    return Status::invalid_argument("bad shard directory name '" + sub + "'");
  HYDRO_RETURN_IF_ERROR(dir_->fs_.make_dir(staging_ + "/" + sub, 0700));
  subdir_ = sub;
  return Status::OK();
}

Status CheckpointWriter::sync_subdir() {
  HYDRO_RETURN_IF_ERROR(sync_files());
  return subdir_.empty() ? Status::OK() : dir_->fs_.sync_dir(staging_ + "/" + subdir_);
}

void CheckpointWriter::add_files(const std::vector<ManifestFile>& files, bool sharded) {
  manifest_.files.insert(manifest_.files.end(), files.begin(), files.end());
  if (sharded) manifest_.sharded = true;
}

Status CheckpointWriter::commit(CheckpointInfo* out) {
  if (done_) return Status::invalid_argument("checkpoint already committed");
  if (!owner_) return Status::invalid_argument("a joined shard writer cannot commit " + staging_);
  Fs& fs = dir_->fs_;
  const std::string& root = dir_->root_;
  const std::string name = CheckpointDir::name_for(manifest_.step);
  const std::string final_path = root + "/" + name;

  // Not committed until the rename below: any failure leaves `latest` where it was.
  HYDRO_RETURN_IF_ERROR(sync_files());  // every file durable before the manifest names it
  int64_t newest = 0;
  HYDRO_RETURN_IF_ERROR(dir_->newest_generation(&newest));
  manifest_.generation = newest + 1;
  std::string json = manifest_.to_json();
  std::unique_ptr<WritableFile> f;
  HYDRO_RETURN_IF_ERROR(fs.new_writable(staging_ + "/" + Manifest::kFileName, &f));
  HYDRO_RETURN_IF_ERROR(f->append(json.data(), json.size()));
  HYDRO_RETURN_IF_ERROR(f->sync());
  HYDRO_RETURN_IF_ERROR(f->close());
  HYDRO_RETURN_IF_ERROR(sync_subdir());
  HYDRO_RETURN_IF_ERROR(fs.sync_dir(staging_));

  Status s = fs.rename_noreplace(staging_, final_path);
  if (!s.ok() && fs.exists(final_path)) {
    // The same step was committed before (a resume from an older checkpoint got here again).
    // Move the old one aside. A crash between the two renames can leave `latest` dangling;
    // latest_valid() then falls back to the newest complete checkpoint.
    std::string aside = root + "/" + kStagingPrefix + "old-" + name + private_suffix();
    HYDRO_RETURN_IF_ERROR(fs.rename_noreplace(final_path, aside));
    s = fs.rename_noreplace(staging_, final_path);
    if (s.ok()) {
      (void)fs.remove_tree(aside);
    } else if (Status back = fs.rename_noreplace(aside, final_path); !back.ok()) {
      // Neither is in place: keep the old one aside (open() never cleans a live writer's), and say where.
      return Status::io(s.message() + "; the earlier checkpoint of step " + std::to_string(manifest_.step) +
                        " could not be put back and is in " + aside + ": " + back.message());
    }
  }
  HYDRO_RETURN_IF_ERROR(s);
  done_ = true;

  // Visible from here on. A failure now cannot be undone: report "durability uncertain".
  Status d = fs.sync_dir(root);
  if (d.ok()) d = dir_->swap_latest(name);
  if (out) *out = CheckpointInfo{name, final_path, manifest_.step};
  if (!d.ok()) return Status::durability_uncertain("checkpoint " + final_path + ": " + d.message());
  if (prune_) dir_->prune_after(CheckpointInfo{name, final_path, manifest_.step});
  return Status::OK();
}

void CheckpointDir::prune_after(const CheckpointInfo& committed) {
  if (Status p = prune(keep_last_); !p.ok())
    log("warning: committed " + committed.path + ", but removing old checkpoints failed: " + p.message());
}

Status CheckpointDir::swap_latest(const std::string& name) {
  std::string tmp = root_ + "/" + kLinkPrefix + name + private_suffix();
  HYDRO_RETURN_IF_ERROR(fs_.symlink(name, tmp));
  Status s = fs_.rename(tmp, root_ + "/" + kLatest);
  if (!s.ok()) {
    (void)fs_.remove_tree(tmp);
    return s;
  }
  return fs_.sync_dir(root_);
}

Status CheckpointDir::read_manifest(const std::string& name, Manifest* out) const {
  const std::string dir = root_ + "/" + name;
  const std::string mpath = dir + "/" + Manifest::kFileName;
  std::string text;
  Status s = fs_.read_file(mpath, &text);
  if (!s.ok()) return Status::corruption("checkpoint " + dir + ": missing or unreadable manifest: " + s.message());
  HYDRO_RETURN_IF_ERROR(Manifest::parse(text, mpath, out));
  int64_t step = 0;
  if (!parse_name(name, &step) || step != out->step)
    return Status::corruption(mpath + ": step " + std::to_string(out->step) + " does not match directory " + name);
  return Status::OK();
}

Status CheckpointDir::verify(const std::string& name, Manifest* out, int only_rank) const {
  const std::string dir = root_ + "/" + name;
  Manifest m;
  HYDRO_RETURN_IF_ERROR(read_manifest(name, &m));
  Status s;
  XXH64_state_t* hash = XXH64_createState();
  for (const auto& f : m.files) {
    const bool others = f.name.find('/') != std::string::npos && !Manifest::in_shard(f.name, only_rank);
    if (only_rank >= 0 && m.sharded && others) continue;
    const std::string path = dir + "/" + f.name;
    uint64_t size = 0;
    XXH64_reset(hash, 0);
    s = fs_.read_stream(path, [&](const char* data, size_t n) {
      XXH64_update(hash, data, n);
      size += n;
    });
    if (!s.ok())
      s = Status::corruption("checkpoint file " + path + ": " + s.message());
    else if (size != f.size)
      s = Status::corruption("checkpoint file " + path + ": size " + std::to_string(size) + ", manifest says " +
                             std::to_string(f.size) + " (truncated?)");
    else if (XXH64_digest(hash) != f.xxh64)
      s = Status::corruption("checkpoint file " + path + ": checksum does not match the manifest");
    if (!s.ok()) break;
  }
  XXH64_freeState(hash);
  HYDRO_RETURN_IF_ERROR(s);
  if (out) *out = std::move(m);
  return Status::OK();
}

Status CheckpointDir::list(std::vector<CheckpointInfo>* out) const {
  out->clear();
  std::vector<std::string> names;
  Status s = fs_.list_dir(root_, &names);
  if (s.code() == Code::not_found) return Status::OK();  // no directory yet: no checkpoints
  HYDRO_RETURN_IF_ERROR(s);
  for (const auto& n : names) {
    int64_t step;
    if (parse_name(n, &step)) out->push_back({n, root_ + "/" + n, step});
  }
  std::sort(out->begin(), out->end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return Status::OK();
}

std::vector<CheckpointInfo> CheckpointDir::list() const {
  std::vector<CheckpointInfo> out;
  (void)list(&out);
  return out;
}

Status CheckpointDir::resume_order(std::vector<CheckpointInfo>* out, std::vector<std::string>* warnings) const {
  out->clear();
  std::string target;
  const std::string link = root_ + "/" + kLatest;
  Status s = fs_.read_link(link, &target);
  int64_t step = 0;
  if (s.ok() && parse_name(target, &step))
    out->push_back(CheckpointInfo{target, root_ + "/" + target, step});
  else if (s.ok())
    warnings->push_back(link + " points at '" + target + "', which is not a checkpoint name");
  else if (s.code() != Code::not_found)
    warnings->push_back(s.message());
  std::vector<CheckpointInfo> all;
  HYDRO_RETURN_IF_ERROR(in_commit_order(&all));
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (it->name != target) out->push_back(*it);
  return Status::OK();
}

Status CheckpointDir::latest_valid(std::optional<CheckpointInfo>* out, std::vector<std::string>* warnings) const {
  out->reset();
  std::string target;
  const bool has_latest = fs_.read_link(root_ + "/" + kLatest, &target).ok();
  std::vector<CheckpointInfo> order;
  HYDRO_RETURN_IF_ERROR(resume_order(&order, warnings));
  for (const auto& c : order) {
    Status v = verify(c.name);
    if (v.ok()) {
      if (has_latest && c.name != target) warnings->push_back("falling back to " + c.path);
      *out = c;
      return Status::OK();
    }
    warnings->push_back(v.message());
  }
  return Status::OK();
}

Status CheckpointDir::prune(int keep_last) {
  if (keep_last <= 0) return Status::OK();
  std::string latest;
  (void)fs_.read_link(root_ + "/" + kLatest, &latest);
  // Oldest first. Only a checkpoint whose manifest was read and says it is not force_save is a
  // candidate: one that cannot be read now (a disk or NFS hiccup) may be a force_save, and stays.
  std::vector<std::pair<int64_t, CheckpointInfo>> candidates;  // (generation, checkpoint)
  std::vector<CheckpointInfo> committed;
  HYDRO_RETURN_IF_ERROR(list(&committed));
  for (auto& c : committed) {
    Manifest m;
    if (read_manifest(c.name, &m).ok() && !m.keep) candidates.emplace_back(m.generation, std::move(c));
  }
  // In commit order, oldest first (a resume from an older checkpoint commits lower steps later).
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  int excess = static_cast<int>(candidates.size()) - keep_last;
  for (int i = 0; i < excess; ++i) {
    const CheckpointInfo& c = candidates[i].second;
    if (c.name == latest || protected_.count(c.name)) continue;
    HYDRO_RETURN_IF_ERROR(fs_.remove_tree(c.path));
  }
  return Status::OK();
}

Status CheckpointDir::in_commit_order(std::vector<CheckpointInfo>* out) const {
  std::vector<CheckpointInfo> committed;
  HYDRO_RETURN_IF_ERROR(list(&committed));
  std::vector<std::pair<int64_t, CheckpointInfo>> all;  // (generation, checkpoint), by step
  for (auto& c : committed) {
    Manifest m;
    all.emplace_back(read_manifest(c.name, &m).ok() ? m.generation : 0, std::move(c));
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out->clear();
  for (auto& [g, c] : all) out->push_back(std::move(c));
  return Status::OK();
}

Status CheckpointDir::newest_generation(int64_t* out) const {
  std::vector<CheckpointInfo> committed;
  HYDRO_RETURN_IF_ERROR(list(&committed));
  *out = 0;
  for (const auto& c : committed) {
    Manifest m;
    if (read_manifest(c.name, &m).ok()) *out = std::max(*out, m.generation);
  }
  return Status::OK();
}

}  // namespace hydro
