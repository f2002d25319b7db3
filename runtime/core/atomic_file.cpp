#include "hydro/atomic_file.h"

#include <unistd.h>

#include <atomic>

namespace hydro {

Status write_file_atomic(const std::string& path, const std::function<Status(WritableFile&)>& fill, Fs& fs) {
  static std::atomic<unsigned> seq{0};
  const size_t slash = path.rfind('/');
  if (path.empty() || path[0] != '/' || slash == std::string::npos || slash + 1 == path.size())
    return Status::invalid_argument("atomic save: '" + path + "' is not an absolute file path");
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  const std::string tmp = dir + "/." + path.substr(slash + 1) + ".tmp-" + std::to_string(::getpid()) + "." +
                          std::to_string(seq.fetch_add(1));
  std::unique_ptr<WritableFile> f;
  HYDRO_RETURN_IF_ERROR(fs.new_writable(tmp, &f));
  Status s = fill(*f);
  if (s.ok()) s = f->sync();
  if (s.ok()) s = f->close();
  if (s.ok()) s = fs.rename(tmp, path);
  if (!s.ok()) {
    f.reset();
    (void)fs.remove_tree(tmp);
    return s;
  }
  Status d = fs.sync_dir(dir);
  if (!d.ok()) return Status::durability_uncertain(path + ": " + d.message());
  return Status::OK();
}

}  // namespace hydro
