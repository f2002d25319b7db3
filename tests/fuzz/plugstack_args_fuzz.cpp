// spank_hydro.so's arguments in plugstack.conf (key=value, read as root inside slurmd and
// slurmstepd), one per line of the input: any list either parses into the admin's defaults, whose
// every value parses again as its key's to the same value, with a checkpoint_dir that expands to
// an absolute path of the job without '..', or is refused with a message that names the file.
// config= is left out: it names a file to read (admin_yaml fuzzes what is read).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "admin_config.h"
#include "admin_settings_check.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hydro::admin;
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.emplace_back();
      continue;
    }
    args.back() += static_cast<char>(data[i]);
  }
  for (const auto& a : args)
    if (a.rfind("config=", 0) == 0) return 0;
  const std::string where = "/etc/slurm/plugstack.conf";
  PluginConfig config;
  const hydro::Status st = PluginConfig::parse(args, where, &config);
  if (!st.ok()) {
    FUZZ_CHECK(st.message().rfind(where, 0) == 0);
    return 0;
  }
  check_admin_settings(config.defaults);
  return 0;
}
