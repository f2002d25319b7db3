// The admin's plugstack.conf arguments for spank_hydro.so, as a plain struct. No Slurm here, so
// the unit tests link it directly.
//
//   required /usr/lib/slurm/spank_hydro.so default_pause=off checkpoint_dir=/scratch/hydro/%u/%j
#pragma once

#include <string>
#include <vector>

#include "hydro/status.h"

namespace hydro::spank {

struct PluginConfig {
  bool default_pause = false;  // default_pause=on|off: --hydro-pause when the user gives none
  std::string checkpoint_dir;  // checkpoint_dir=TEMPLATE: %u user, %U uid, %j job id, %% percent

  // `where` names the file in errors (the plugstack.conf path).
  static Status parse(const std::vector<std::string>& args, const std::string& where, PluginConfig* out);
};

// Expands a checkpoint_dir template. Fails on an unknown %-escape.
Status expand_template(const std::string& tmpl, const std::string& user, unsigned uid, unsigned job_id,
                       std::string* out);

}  // namespace hydro::spank
