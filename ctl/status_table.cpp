#include "status_table.h"

#include <sys/stat.h>

#include <cstdio>
#include <ctime>

#include "hydro/checkpoint_dir.h"

namespace hydro::ctl {

std::string status_table(const std::string& root, bool* ok) {
  *ok = true;
  CheckpointDir dir(root);
  std::vector<std::string> names;
  if (Status s = posix_fs().list_dir(root, &names); !s.ok()) {
    *ok = false;
    return "hydroctl: " + s.message() + "\n";
  }
  std::string latest;
  (void)posix_fs().read_link(root + "/" + CheckpointDir::kLatest, &latest);
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-14s %-19s %12s  %-8s %s\n", "STEP", "TIME", "BYTES", "STATE", "");
  out += line;
  for (const auto& c : dir.list()) {
    Manifest m;
    Status v = dir.verify(c.name, &m);
    uint64_t bytes = 0;
    for (const auto& f : m.files) bytes += f.size;
    struct stat st {};
    char when[32] = "?";
    if (::stat(c.path.c_str(), &st) == 0) {
      struct tm tm;
      ::localtime_r(&st.st_mtime, &tm);
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    }
    std::snprintf(line, sizeof line, "%-14lld %-19s %12llu  %-8s %s\n", static_cast<long long>(c.step), when,
                  static_cast<unsigned long long>(bytes), v.ok() ? "verified" : "CORRUPT",
                  c.name == latest ? "<- latest" : "");
    out += line;
    if (!v.ok()) out += "    " + v.message() + "\n";
  }
  if (!latest.empty() && !posix_fs().exists(root + "/" + latest))
    out += "latest -> " + latest + " is dangling: hydro-launch falls back to the newest verified checkpoint\n";
  return out;
}

}  // namespace hydro::ctl
