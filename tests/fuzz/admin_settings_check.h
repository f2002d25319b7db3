// What the admin_yaml and plugstack_args targets assert of the settings they load: each value
// parses again as its key's to the same value, and a checkpoint_dir expands to an absolute path of
// the job (its id in it, no '..').
#pragma once

#include <string>

#include "admin_config.h"
#include "fuzz_check.h"

inline void check_admin_settings(const hydro::admin::JobSettings& settings) {
  using namespace hydro::admin;
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
    FUZZ_CHECK(dir.find("/../") == std::string::npos);
  }
}
