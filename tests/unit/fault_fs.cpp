#include "fault_fs.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <stdexcept>

namespace hydro::test {
namespace {

class FaultFile : public WritableFile {
 public:
  FaultFile(FaultFs& fs, std::unique_ptr<WritableFile> real, std::string path)
      : fs_(fs), real_(std::move(real)), path_(std::move(path)) {}
  Status append(const void* d, size_t n) override {
    if (fs_.writes++ == fs_.fail_write_at) return Status::from_errno(ENOSPC, "write " + path_);
    return real_->append(d, n);
  }
  Status sync() override {
    if (fs_.syncs++ == fs_.fail_sync_at) return Status::from_errno(EIO, "fsync " + path_);
    return real_->sync();
  }
  Status start_sync() override { return real_->start_sync(); }
  Status close() override { return real_->close(); }

 private:
  FaultFs& fs_;
  std::unique_ptr<WritableFile> real_;
  std::string path_;
};

}  // namespace

Status FaultFs::new_writable(const std::string& path, std::unique_ptr<WritableFile>* out) {
  if (on_new_writable) on_new_writable(path);
  std::unique_ptr<WritableFile> real;
  HYDRO_RETURN_IF_ERROR(real_.new_writable(path, &real));
  out->reset(new FaultFile(*this, std::move(real), path));
  return Status::OK();
}

namespace {
const char kDiskTemplate[] = "/tmp/hydro-test.XXXXXX";

std::string make_temp_dir(std::string tmpl) {
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
  return tmpl;
}
}  // namespace

TempDir::TempDir() : path(make_temp_dir(kDiskTemplate)) {}

TempDir::TempDir(InMemory) {
  struct stat st {};
  const bool shm = ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode);
  path = make_temp_dir(shm ? "/dev/shm/hydro-test.XXXXXX" : kDiskTemplate);
}

TempDir::~TempDir() { (void)posix_fs().remove_tree(path); }

Status write_checkpoint(CheckpointDir& dir, int64_t step, const std::string& payload) {
  std::unique_ptr<CheckpointWriter> w;
  HYDRO_RETURN_IF_ERROR(dir.begin(step, &w));
  HYDRO_RETURN_IF_ERROR(w->write_file("model.pt", payload + std::to_string(step)));
  HYDRO_RETURN_IF_ERROR(w->write_file("optimizer.pt", std::string(1000, 'o')));
  return w->commit();
}

}  // namespace hydro::test
