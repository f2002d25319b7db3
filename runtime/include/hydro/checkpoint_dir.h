// The checkpoint-directory protocol. A root holds one directory per step and a `latest` symlink:
//
//   root/step-000000000120/{model.pt, ..., manifest.json}
//   root/latest -> step-000000000120
//
// A checkpoint is written into a private staging directory, every file fsynced, the manifest
// (sizes and xxh64 of every file) written last, the staging directory renamed into place with
// RENAME_NOREPLACE, the root fsynced, and `latest` swapped by renaming a fresh symlink over it.
// A crash at any point leaves `latest` on the previous complete checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hydro/durable_fs.h"
#include "hydro/manifest.h"
#include "hydro/status.h"

struct XXH64_state_s;  // xxhash's streaming state

namespace hydro {

struct CheckpointInfo {
  std::string name;  // step-000000000120
  std::string path;  // root/step-000000000120
  int64_t step = 0;
};

class CheckpointDir;
class CheckpointWriter;

// A file's bytes, streamed: each call appends; the first failure (it names the file) is returned
// by this call and every later one.
using ByteSink = std::function<Status(const void* data, size_t size)>;
// Writes one file's bytes through the sink it is given.
using StreamWriter = std::function<Status(const ByteSink& sink)>;
// Makes a file from a checkpoint's other files, once they are all written: given the staging
// directory and their names in the manifest, sets the bytes (empty: no file). A failure names why.
using Composer =
    std::function<Status(const std::string& staging, const std::vector<std::string>& files, std::string* bytes)>;

// One file being streamed into a checkpoint: every append is written and hashed as it comes.
class FileSink {
 public:
  ~FileSink();
  Status append(const void* data, size_t size);
  // Ends the file, starts its writeback and records its size and hash in the manifest. It is
  // fsynced and closed with the checkpoint's other files, by commit() or sync_subdir(), so that
  // one file goes to disk while the next is filled.
  Status finish();

 private:
  friend class CheckpointWriter;
  FileSink(CheckpointWriter* owner, std::string name, std::unique_ptr<WritableFile> file);
  CheckpointWriter* owner_;
  std::string name_;
  std::unique_ptr<WritableFile> file_;
  ::XXH64_state_s* hash_;
  uint64_t size_ = 0;
  bool finished_ = false;
};

// One checkpoint being written. Destroying it without commit() removes the staging directory.
class CheckpointWriter {
 public:
  ~CheckpointWriter();
  // Starts a file of the checkpoint, to be filled by appends (no copy of the whole state).
  Status open_file(const std::string& name, std::unique_ptr<FileSink>* out);
  // Writes one whole file into the checkpoint (fsynced as FileSink::finish() says).
  Status write_file(const std::string& name, const void* data, size_t size);
  Status write_file(const std::string& name, const std::string& bytes) {
    return write_file(name, bytes.data(), bytes.size());
  }
  // DCP's index of a sharded state (Manifest::kDcpMetadata), made by `compose` from the files
  // finished so far and written at the checkpoint's top. Call once every file is written. A failed
  // compose is logged and leaves the checkpoint without it: hydro's resume does not read it.
  Status compose_dcp_metadata(const Composer& compose);
  void set_epoch(int64_t epoch) { manifest_.epoch = epoch; }
  void set_world_size(int n) { manifest_.world_size = n; }
  // Each rank's host, by rank (a sharded checkpoint of several ranks).
  void set_hosts(std::vector<std::string> hosts) { manifest_.hosts = std::move(hosts); }
  // The writer's compute threads (ATen's, OpenBLAS's; 0: unknown), recorded for the resume.
  void set_threads(int aten, int blas) {
    manifest_.threads = aten;
    manifest_.blas_threads = blas;
  }

  // Shards (hydro/checkpoint_group.h): the files opened from now on go into `sub`/ (e.g. "rank-1"),
  // named "rank-1/model.pt" in the manifest.
  Status set_subdir(const std::string& sub);
  // fsyncs the finished files and the shard's directory: call when the shard's files are finished.
  Status sync_subdir();
  // The files finished so far (sizes and hashes), and files other ranks wrote into this staging
  // directory, added to the manifest by the committing rank.
  const std::vector<ManifestFile>& files() const { return manifest_.files; }
  void add_files(const std::vector<ManifestFile>& files, bool sharded);
  const std::string& staging() const { return staging_; }
  // The staging directory's name in the root (what another rank joins).
  std::string staging_name() const { return staging_.substr(staging_.rfind('/') + 1); }
  // force_save: keep this checkpoint always; keep_last neither counts nor removes it.
  void set_keep(bool keep) { manifest_.keep = keep; }
  // Makes the checkpoint durable and points `latest` at it, then prunes to keep_last. On
  // Code::durability_uncertain the checkpoint is visible but a later fsync failed: it may not
  // survive a power loss. A failed prune is logged and leaves the commit ok.
  Status commit(CheckpointInfo* out = nullptr);
  // commit() leaves the prune to the caller (CheckpointDir::prune_after): a group's committer
  // tells its peers first, so they need not wait while it removes every rank's old shards.
  void defer_prune() { prune_ = false; }

 private:
  friend class CheckpointDir;
  friend class FileSink;
  CheckpointWriter(CheckpointDir* dir, std::string staging, int64_t step, bool owner);
  Status sync_files();  // fsyncs and closes the files finished since the last call
  CheckpointDir* dir_;
  std::string staging_;
  std::string subdir_;
  bool owner_;  // created the staging directory: commits it, or removes it if never committed
  Manifest manifest_;
  // Finished, writeback started; open until fsynced, so at most kMostUnsynced (then all are fsynced).
  static constexpr size_t kMostUnsynced = 64;
  std::vector<std::unique_ptr<WritableFile>> unsynced_;
  bool done_ = false;
  bool prune_ = true;
};

class CheckpointDir {
 public:
  static constexpr const char* kLatest = "latest";

  explicit CheckpointDir(std::string root, Fs& fs = posix_fs(), int keep_last = 0);

  const std::string& root() const { return root_; }
  // Creates the root (mode 0700) if missing and, with `clean`, removes staging left by dead
  // writers on this machine (only the rank that commits may clean: another node's writer would
  // look dead from here).
  Status open(bool clean = true);
  Status begin(int64_t step, std::unique_ptr<CheckpointWriter>* out);
  // Another rank's staging directory (its base name): write a shard into it. The returned writer
  // cannot commit, and leaves the directory to its owner.
  Status join(const std::string& staging_name, int64_t step, std::unique_ptr<CheckpointWriter>* out);
  // Creates a staging directory of the given name (for a node that cannot see the owner's).
  Status begin_named(const std::string& staging_name, int64_t step, std::unique_ptr<CheckpointWriter>* out);

  // Checks a checkpoint against its manifest: every file present, of the right size and hash.
  // `only_rank` >= 0, in a sharded checkpoint: that rank's shard and the files outside every shard
  // (the ranks of a group each check their own, and resume only from what all of them passed).
  Status verify(const std::string& name, Manifest* out = nullptr, int only_rank = -1) const;
  // Reads and checks only the manifest (no file hashes): for a checkpoint verify() just passed.
  Status read_manifest(const std::string& name, Manifest* out) const;
  // The newest checkpoint that verifies: `latest` first, then the others newest first.
  // Sets *out to nullopt when there is none. Problems found on the way go to *warnings.
  Status latest_valid(std::optional<CheckpointInfo>* out, std::vector<std::string>* warnings) const;
  // The order latest_valid() tries them in (unverified): for checkers that split the work.
  Status resume_order(std::vector<CheckpointInfo>* out, std::vector<std::string>* warnings) const;
  // Committed checkpoints, lowest step first (not verified). A directory that cannot be listed
  // (a disk or NFS hiccup) is an error, never an empty list: that would start a job afresh.
  Status list(std::vector<CheckpointInfo>* out) const;
  // The same, empty when the directory cannot be listed: for a display only.
  std::vector<CheckpointInfo> list() const;
  // The same in commit order (the manifests' generation, then step), oldest first.
  Status in_commit_order(std::vector<CheckpointInfo>* out) const;
  // Deletes all but the `keep_last` newest committed checkpoints (commit order, not step). Never
  // deletes `latest`'s target, a protected one, or a force_save checkpoint (manifest "keep"), and
  // force_saves do not count toward keep_last.
  Status prune(int keep_last);
  // After `committed`: prune to this object's keep_last; a failure is logged (housekeeping: the
  // commit stands, and what was not removed goes at a later prune).
  void prune_after(const CheckpointInfo& committed);
  // Never pruned by this object: e.g. the checkpoint the job resumed from, which other ranks may
  // still be reading (async mode, where rank 0 runs ahead without a vote).
  void protect(const std::string& name) { protected_.insert(name); }

  static std::string name_for(int64_t step);
  static bool parse_name(const std::string& name, int64_t* step);

 private:
  friend class CheckpointWriter;
  Status swap_latest(const std::string& name);
  Status newest_generation(int64_t* out) const;
  std::set<std::string> protected_;
  std::string root_;
  Fs& fs_;
  int keep_last_;
};

}  // namespace hydro
