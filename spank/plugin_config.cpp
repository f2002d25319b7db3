#include "plugin_config.h"

#include "hydro/settings.h"

namespace hydro::spank {

Status PluginConfig::parse(const std::vector<std::string>& args, const std::string& where, PluginConfig* out) {
  PluginConfig c;
  for (const auto& arg : args) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos)
      return Status::invalid_argument(where + ": spank_hydro.so argument '" + arg + "' is not key=value");
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (key == "default_pause") {
      HYDRO_RETURN_IF_ERROR(parse_on_off(value, where + ": default_pause", &c.default_pause));
    } else if (key == "checkpoint_dir") {
      if (value.empty() || value[0] != '/')
        return Status::invalid_argument(where + ": checkpoint_dir='" + value + "' must be an absolute path");
      if (value.find("/../") != std::string::npos || value.size() >= 3 && value.compare(value.size() - 3, 3, "/..") == 0)
        return Status::invalid_argument(where + ": checkpoint_dir='" + value + "' must not contain '..'");
      std::string probe;
      HYDRO_RETURN_IF_ERROR(expand_template(value, "u", 0, 0, &probe));
      c.checkpoint_dir = value;
    } else {
      return Status::invalid_argument(where + ": unknown spank_hydro.so key '" + key +
                                      "' (known: default_pause, checkpoint_dir)");
    }
  }
  *out = std::move(c);
  return Status::OK();
}

Status expand_template(const std::string& tmpl, const std::string& user, unsigned uid, unsigned job_id,
                       std::string* out) {
  std::string r;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '%') {
      r += tmpl[i];
      continue;
    }
    char c = i + 1 < tmpl.size() ? tmpl[++i] : '\0';
    switch (c) {
      case 'u': r += user; break;
      case 'U': r += std::to_string(uid); break;
      case 'j': r += std::to_string(job_id); break;
      case '%': r += '%'; break;
      default:
        return Status::invalid_argument("checkpoint_dir: unknown escape '%" + std::string(1, c) +
                                        "' (known: %u, %U, %j, %%)");
    }
  }
  *out = std::move(r);
  return Status::OK();
}

}  // namespace hydro::spank
