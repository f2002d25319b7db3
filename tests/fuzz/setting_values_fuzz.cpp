// Every setting's value (a job's HYDRO_* variables, --hydro-* options, the admin's YAML and
// plugstack arguments), through the settings schema: the first byte picks the setting, the rest is
// the value. A value is refused with a message that names where it came from, or accepted; a
// number accepted lies within the setting's bounds, and the same value is judged the same twice.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "hydro/setting_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& schema = hydro::settings_schema();
  const hydro::SettingRow& row = schema[data[0] % schema.size()];
  const std::string value(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string where = std::string("fuzz: ") + row.env;
  hydro::Status s = hydro::check_setting(row, value, where);
  FUZZ_CHECK(s.ok() == hydro::check_setting(row, value, where).ok());
  if (!s.ok()) {
    FUZZ_CHECK(s.message().find(row.env) != std::string::npos);
    return 0;
  }
  if (row.kind == hydro::SettingKind::whole_number) {
    const long long n = std::stoll(value);  // accepted: a number, which stoll reads
    FUZZ_CHECK(n >= row.min && n <= row.max);
  }
  if (row.kind == hydro::SettingKind::absolute_path) FUZZ_CHECK(!value.empty() && value[0] == '/');
  return 0;
}
