// Every hydro setting, once: its job variable, the admin's key and the user's option (for those an
// admin or a user sets through the SPANK plugin), its kind and range, its default and its help.
// The plugin's options and config (config/admin_config.cpp), the runtime's Settings::from_env and
// hydro-launch's options all check values here, and a test holds the admin's guide's tables to it
// (docs/admins-guide.md, "Settings").
// Adding a setting is a row here plus its use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hydro/status.h"

namespace hydro {

enum class SettingKind {
  on_off,         // on|off (also true/false, yes/no, 1/0)
  whole_number,   // in [min, max]
  absolute_path,  // begins with '/'
  choice,         // one of `choices` ("a|b|c")
  signal_map,     // hydro/signal_map.h
};

struct SettingRow {
  const char* env;      // the job's variable: HYDRO_KEEP_LAST
  const char* key;      // the admin's YAML and plugstack key: keep_last; null: not the admin's
  const char* option;   // the user's srun/sbatch/salloc option without "--": hydro-keep-last; null: none
  const char* arginfo;  // what --help shows for the value: N
  SettingKind kind;
  int64_t min, max;      // whole_number
  const char* choices;   // choice
  const char* fallback;  // the value when nothing sets it
  const char* help;
};

// Each setting, by what it sets; its variable's name is written once, in its row. Every part that
// reads or sets a variable names it as env_name(Setting::x). In the rows' order.
enum class Setting {
  pause,
  checkpoint_dir,
  checkpoint_every,
  keep_last,
  checkpoint_mode,
  max_restarts,
  restarts,
  time_limit_margin,
  signals,
  gpu_release,
  suspend_grace,
  direct_io,
  suspend_checkpoint,
  store_timeout,
  checkpoint_failure_grace,
  resume_from,
  async_copy,
  gpu_allocator,
};

const std::vector<SettingRow>& settings_schema();
// The row of a job variable; throws std::logic_error for a name that has none (a programming error).
// A view, not a string: a caller's const char* makes no temporary for the reference to outlive.
const SettingRow& setting_row(std::string_view env);
const SettingRow& setting_row(Setting s);
// The job variable of a setting: HYDRO_PAUSE for Setting::pause.
inline const char* env_name(Setting s) { return setting_row(s).env; }

// Checks `value` against its row. `where` names the source in the error: the variable
// (HYDRO_KEEP_LAST), the option (--hydro-keep-last) or the admin's file and key.
Status check_setting(const SettingRow& row, const std::string& value, const std::string& where);

}  // namespace hydro
