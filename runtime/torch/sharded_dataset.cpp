#include "hydro/sharded_dataset.h"
#include "raise.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hydro {
namespace {

[[noreturn]] void dataset_fail(const std::string& what) { throw std::runtime_error("hydro: sharded dataset: " + what); }

// The regular files in `folder`, not hidden.
std::vector<std::string> sample_names(const std::string& folder) {
  DIR* d = ::opendir(folder.c_str());
  if (!d) dataset_fail("cannot open folder '" + folder + "': " + std::strerror(errno));
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (::stat((folder + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) names.push_back(name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

ShardedFileDataset::ShardedFileDataset(std::string folder, ShardSpec spec) {
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  std::vector<std::string> mine;
  Status s = shard_split(folder, sample_names(folder), spec, &mine);
  throw_if_error(s);
  files_.reserve(mine.size());
  for (const auto& name : mine) files_.push_back(folder + "/" + name);
}

torch::data::Example<> ShardedFileDataset::get(size_t index) {
  if (index >= files_.size())
    dataset_fail("index " + std::to_string(index) + " is outside this rank's " + std::to_string(files_.size()) +
                 " samples");
  const std::string& path = files_[index];
  torch::Tensor data, target;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    if (!archive.try_read("0", data))
      dataset_fail("sample file '" + path + "' holds no tensor: save one with torch::save(tensor, path)");
    archive.try_read("1", target);
  } catch (const c10::Error& e) {
    dataset_fail("cannot read sample file '" + path + "': " + e.what_without_backtrace());
  }
  return {data, target};
}

}  // namespace hydro
