// The admin's configuration (plugstack arguments and /etc/hydro/hydro.yaml), as a plain struct
// with explicit defaults, and the per-job settings a user gives on the command line. Read by the
// SPANK plugin and by hydroctl; no Slurm here.
//
//   required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_hydro.so config=/etc/hydro/hydro.yaml default_pause=on
//
// `config=PATH` names a YAML file (etc/hydro.yaml documents every key); the other plugstack
// arguments are the same keys as key=value and override the file's. Precedence for what reaches
// the job: the srun/sbatch/salloc option, then the job's environment, then this admin config.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hydro/status.h"

namespace hydro::admin {

// The settings a job can carry, by admin key (checkpoint_every), each as the job's variable holds
// it: checked against its schema row, on/off kinds as "on" or "off". A key not set is left to the
// next source in the precedence. A new setting is a schema row; nothing here changes.
class JobSettings {
 public:
  std::optional<std::string> get(const std::string& key) const;
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  void set(const std::string& key, std::string value) { values_[key] = std::move(value); }

 private:
  std::map<std::string, std::string> values_;
};

// One per-job setting: its user option, its admin key, and the variable the job sees. The rows of
// the core's settings schema (hydro/setting_schema.h) that have an admin key.
struct SettingSpec {
  const char* key;      // admin key (YAML and plugstack): checkpoint_every
  const char* option;   // user option without "--": hydro-checkpoint-every
  const char* env;      // HYDRO_CKPT_EVERY
  const char* arginfo;  // shown by --help: N
  const char* help;
};
const std::vector<SettingSpec>& job_setting_specs();

// Parses one value of a per-job setting (`spec.key`) into `out`. `where` prefixes the error:
// "--hydro-keep-last" for a user option, "/etc/hydro/hydro.yaml: keep_last" for the admin's.
// `is_template`: checkpoint_dir may hold %-escapes (the admin's form) and must then contain %j.
Status parse_job_setting(const SettingSpec& spec, const std::string& value, const std::string& where, bool is_template,
                         JobSettings* out);

// The value of a set setting as the job's environment variable holds it; "" if unset.
inline std::string job_setting_value(const JobSettings& s, const SettingSpec& spec) {
  return s.get(spec.key).value_or("");
}

struct PluginConfig {
  // Admin defaults for every job. checkpoint_dir is a template: %u user, %U uid, %j job id,
  // %% percent; the plugin creates it for each job as the job's user, mode 0700 (job_dir.h).
  JobSettings defaults;
  std::string config_file;  // config=PATH, the YAML read

  // `where` names the file in errors (the plugstack.conf path).
  static Status parse(const std::vector<std::string>& args, const std::string& where, PluginConfig* out);
  // Reads a YAML mapping of the same keys. Errors name the file, the key and the line.
  static Status load_yaml(const std::string& path, JobSettings* out);
};

// Expands a checkpoint_dir template. Fails on an unknown %-escape.
Status expand_template(const std::string& tmpl, const std::string& user, unsigned uid, unsigned job_id,
                       std::string* out);

}  // namespace hydro::admin
