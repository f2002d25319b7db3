// The admin's YAML (/etc/hydro/hydro.yaml, which the plugin reads as root inside slurmstepd, and
// hydroctl as the user): any bytes either load into settings whose every value parses again as
// its key's to the same value, with a checkpoint_dir that expands to an absolute path of the job,
// or are refused with a message that names the file. No exception leaves the loader.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "admin_config.h"
#include "fuzz_check.h"

namespace {

// The input as a file: one memfd, rewritten for each input, read through its /proc path.
const std::string& input_file(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("hydro.yaml", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  FUZZ_CHECK(fd >= 0 && ::ftruncate(fd, 0) == 0);
  FUZZ_CHECK(size == 0 || ::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size));
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hydro::admin;
  const std::string& path = input_file(data, size);
  JobSettings settings;
  const hydro::Status st = PluginConfig::load_yaml(path, &settings);
  if (!st.ok()) {
    FUZZ_CHECK(st.message().rfind(path, 0) == 0);
    return 0;
  }
  for (const SettingSpec& spec : job_setting_specs()) {
    const auto value = settings.get(spec.key);
    if (!value) continue;
    JobSettings again;
    FUZZ_CHECK(parse_job_setting(spec, *value, "again", true, &again).ok());
    FUZZ_CHECK(again.get(spec.key) == value);
    if (std::string(spec.key) != "checkpoint_dir") continue;
    std::string dir;
    FUZZ_CHECK(expand_template(*value, "user", 1000, 42, &dir).ok());
    FUZZ_CHECK(!dir.empty() && dir[0] == '/' && dir.find("42") != std::string::npos);
  }
  return 0;
}
