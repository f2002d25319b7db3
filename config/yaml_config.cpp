// PluginConfig::load_yaml: the admin's YAML file (etc/hydro.yaml). Every error names the file,
// the line and the key; yaml-cpp's exceptions never leave this file.
#include <yaml-cpp/yaml.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "admin_config.h"

namespace hydro::admin {
namespace {

std::string at(const std::string& path, const YAML::Mark& m) { return path + ": line " + std::to_string(m.line + 1); }

Status read_file(const std::string& path, std::string* out) {
  const std::string what = path + ": cannot read the hydro config";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno(errno, what);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = errno;
    ::close(fd);
    return S_ISDIR(st.st_mode) ? Status::from_errno(EISDIR, what)
           : err               ? Status::from_errno(err, what)
                               : Status::invalid_argument(what + ": not a file");
  }
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::from_errno(err, what);
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::OK();
}

Status load(const std::string& path, JobSettings* out) {
  std::string text;
  HYDRO_RETURN_IF_ERROR(read_file(path, &text));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::invalid_argument(at(path, e.mark) + ": not valid YAML: " + e.msg);
  }
  if (root.IsNull()) return Status::OK();  // an empty file: no defaults
  if (!root.IsMap()) return Status::invalid_argument(path + ": must be a mapping of hydro settings (key: value)");
  JobSettings s;
  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) return Status::invalid_argument(at(path, kv.first.Mark()) + ": a key must be a name");
    std::string key = kv.first.Scalar();
    const SettingSpec* spec = nullptr;
    for (const auto& sp : job_setting_specs())
      if (key == sp.key) spec = &sp;
    if (!spec) {
      std::string known;
      for (const auto& sp : job_setting_specs()) known += std::string(known.empty() ? "" : ", ") + sp.key;
      return Status::invalid_argument(at(path, kv.first.Mark()) + ": unknown key '" + key + "' (known: " + known + ")");
    }
    if (!seen.insert(key).second)
      return Status::invalid_argument(at(path, kv.first.Mark()) + ": " + key + " is given twice");
    if (kv.second.IsNull()) return Status::invalid_argument(at(path, kv.first.Mark()) + ": " + key + " has no value");
    if (!kv.second.IsScalar())
      return Status::invalid_argument(at(path, kv.second.Mark()) + ": " + key +
                                      " must be a single value, not a list or mapping");
    HYDRO_RETURN_IF_ERROR(
        parse_job_setting(*spec, kv.second.Scalar(), at(path, kv.second.Mark()) + ": " + key, true, &s));
  }
  *out = std::move(s);
  return Status::OK();
}

}  // namespace

Status PluginConfig::load_yaml(const std::string& path, JobSettings* out) {
  try {
    return load(path, out);
  } catch (const std::exception& e) {
    return Status::invalid_argument(path + ": " + e.what());
  }
}

}  // namespace hydro::admin
