// A checkpoint's files: each streamed in and hashed as it comes, its writeback started when it
// ends, and all of them fsynced together before the manifest names them.
#include <xxhash.h>

#include "hydro/checkpoint_dir.h"
#include "hydro/log.h"

namespace hydro {

Status CheckpointWriter::open_file(const std::string& name, std::unique_ptr<FileSink>* out) {
  if (done_) return Status::invalid_argument("checkpoint already committed");
  const bool hidden = !name.empty() && name[0] == '.' && !(name == Manifest::kDcpMetadata && subdir_.empty());
  if (name.empty() || name.find('/') != std::string::npos || hidden || name == Manifest::kFileName)
    return Status::invalid_argument("bad checkpoint file name '" + name + "'");
  const std::string full = subdir_.empty() ? name : subdir_ + "/" + name;
  for (const auto& f : manifest_.files)
    if (f.name == full) return Status::invalid_argument("checkpoint file '" + full + "' written twice");
  std::unique_ptr<WritableFile> f;
  HYDRO_RETURN_IF_ERROR(dir_->fs_.new_writable(staging_ + "/" + full, &f));
  out->reset(new FileSink(this, full, std::move(f)));
  return Status::OK();
}

Status CheckpointWriter::compose_dcp_metadata(const Composer& compose) {
  std::vector<std::string> names;
  for (const auto& f : manifest_.files) names.push_back(f.name);
  std::string bytes;
  if (Status s = compose(staging_, names, &bytes); !s.ok()) {
    // An index for other readers: hydro resumes without it, so the checkpoint is not given up.
    log("warning: checkpoint of step " + std::to_string(manifest_.step) + " has no " + Manifest::kDcpMetadata +
        " (torch.distributed.checkpoint cannot load it; hydro can): " + s.message());
    return Status::OK();
  }
  if (bytes.empty()) return Status::OK();
  const std::string shard = subdir_;
  subdir_.clear();  // at the checkpoint's top
  Status s = write_file(Manifest::kDcpMetadata, bytes);
  subdir_ = shard;
  return s;
}

Status CheckpointWriter::write_file(const std::string& name, const void* data, size_t size) {
  std::unique_ptr<FileSink> sink;
  HYDRO_RETURN_IF_ERROR(open_file(name, &sink));
  HYDRO_RETURN_IF_ERROR(sink->append(data, size));
  return sink->finish();
}

FileSink::FileSink(CheckpointWriter* owner, std::string name, std::unique_ptr<WritableFile> file)
    : owner_(owner), name_(std::move(name)), file_(std::move(file)), hash_(XXH64_createState()) {
  XXH64_reset(hash_, 0);
}

FileSink::~FileSink() { XXH64_freeState(hash_); }

Status FileSink::append(const void* data, size_t size) {
  if (finished_) return Status::invalid_argument("checkpoint file '" + name_ + "' already finished");
  HYDRO_RETURN_IF_ERROR(file_->append(data, size));
  XXH64_update(hash_, data, size);
  size_ += size;
  return Status::OK();
}

Status FileSink::finish() {
  if (finished_) return Status::invalid_argument("checkpoint file '" + name_ + "' already finished");
  finished_ = true;
  HYDRO_RETURN_IF_ERROR(file_->start_sync());
  owner_->unsynced_.push_back(std::move(file_));
  if (owner_->unsynced_.size() >= CheckpointWriter::kMostUnsynced) HYDRO_RETURN_IF_ERROR(owner_->sync_files());
  owner_->manifest_.files.push_back({name_, size_, XXH64_digest(hash_)});
  return Status::OK();
}

Status CheckpointWriter::sync_files() {
  std::vector<std::unique_ptr<WritableFile>> files;
  files.swap(unsynced_);
  for (auto& f : files) {
    HYDRO_RETURN_IF_ERROR(f->sync());
    HYDRO_RETURN_IF_ERROR(f->close());
  }
  return Status::OK();
}

}  // namespace hydro
