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
#include "admin_settings_check.h"
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
  check_admin_settings(settings);
  return 0;
}
