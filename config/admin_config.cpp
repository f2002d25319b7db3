#include "admin_config.h"

#include "hydro/setting_schema.h"
#include "hydro/settings.h"

namespace hydro::admin {
namespace {

// Whether a template holds a %j escape itself: "%%j" is a literal "%j", shared by every job.
bool has_job_escape(const std::string& value) {
  for (size_t i = 0; i + 1 < value.size(); ++i) {
    if (value[i] != '%') continue;
    if (value[i + 1] == 'j') return true;
    ++i;  // skip the escaped character ("%%", "%u", ...)
  }
  return false;
}

bool has_dotdot(const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (path.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

Status parse_dir(const std::string& value, const std::string& where, bool is_template, std::string* out) {
  if (value.empty() || value[0] != '/')
    return Status::invalid_argument(where + "='" + value + "' must be an absolute path");
  if (has_dotdot(value)) return Status::invalid_argument(where + "='" + value + "' must not contain '..'");
  for (char c : value)
    if (static_cast<unsigned char>(c) < 0x20)
      return Status::invalid_argument(where + "='" + value + "' holds a control character");
  if (is_template) {
    std::string probe;
    Status st = expand_template(value, "u", 0, 0, &probe);
    if (!st.ok()) return Status::invalid_argument(where + ": " + st.message());
    if (!has_job_escape(value))
      return Status::invalid_argument(where + "='" + value +
                                      "' must contain %j, so that each job has its own directory");
  }
  *out = value;
  return Status::OK();
}

}  // namespace

const std::vector<SettingSpec>& job_setting_specs() {
  static const std::vector<SettingSpec> specs = [] {
    std::vector<SettingSpec> v;
    for (const auto& row : settings_schema())
      if (row.key) v.push_back({row.key, row.option, row.env, row.arginfo, row.help});
    return v;
  }();
  return specs;
}

std::optional<std::string> JobSettings::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Status parse_job_setting(const SettingSpec& spec, const std::string& value, const std::string& where, bool is_template,
                         JobSettings* out) {
  const SettingRow& row = setting_row(spec.env);
  if (row.kind == SettingKind::absolute_path) {
    std::string dir;
    HYDRO_RETURN_IF_ERROR(parse_dir(value, where, is_template, &dir));
    out->set(spec.key, dir);
    return Status::OK();
  }
  HYDRO_RETURN_IF_ERROR(check_setting(row, value, where));
  if (row.kind == SettingKind::on_off) {
    bool on = false;
    HYDRO_RETURN_IF_ERROR(parse_on_off(value, where, &on));
    out->set(spec.key, on ? "on" : "off");
  } else if (row.kind == SettingKind::whole_number) {
    out->set(spec.key, std::to_string(std::stoll(value)));
  } else {
    out->set(spec.key, value);
  }
  return Status::OK();
}

Status PluginConfig::parse(const std::vector<std::string>& args, const std::string& where, PluginConfig* out) {
  PluginConfig c;
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& arg : args) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos)
      return Status::invalid_argument(where + ": spank_hydro.so argument '" + arg + "' is not key=value");
    pairs.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
  }
  // The YAML file first, whatever its place: the plugstack arguments override it.
  int files = 0;
  for (const auto& kv : pairs) files += kv.first == "config";
  if (files > 1) return Status::invalid_argument(where + ": config= is given twice");
  for (const auto& [key, value] : pairs) {
    if (key != "config") continue;
    if (value.empty() || value[0] != '/')
      return Status::invalid_argument(where + ": config='" + value + "' must be an absolute path");
    c.config_file = value;
    HYDRO_RETURN_IF_ERROR(load_yaml(value, &c.defaults));
  }
  for (const auto& [key, value] : pairs) {
    if (key == "config") continue;
    const SettingSpec* spec = nullptr;
    for (const auto& s : job_setting_specs())
      if (key == s.key) spec = &s;
    if (!spec) {
      std::string known = "config";
      for (const auto& s : job_setting_specs()) known += std::string(", ") + s.key;
      return Status::invalid_argument(where + ": unknown spank_hydro.so key '" + key + "' (known: " + known + ")");
    }
    HYDRO_RETURN_IF_ERROR(parse_job_setting(*spec, value, where + ": " + key, true, &c.defaults));
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
        return Status::invalid_argument("unknown escape '%" + std::string(c ? 1 : 0, c) + "' (known: %u, %U, %j, %%)");
    }
  }
  *out = std::move(r);
  return Status::OK();
}

}  // namespace hydro::admin
