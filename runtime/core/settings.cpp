#include "hydro/settings.h"

#include <cstdlib>

namespace hydro {

Status parse_int(const char* var, const std::string& value, int64_t min, int64_t max, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    return Status::invalid_argument(std::string(var) + "='" + value + "' is not a whole number");
  if (v < min || v > max)
    return Status::invalid_argument(std::string(var) + "=" + value + " is out of range [" + std::to_string(min) +
                                    ", " + std::to_string(max) + "]");
  *out = v;
  return Status::OK();
}

Status parse_on_off(const std::string& value, const std::string& setting, bool* out) {
  if (value == "on" || value == "true" || value == "yes" || value == "1") *out = true;
  else if (value == "off" || value == "false" || value == "no" || value == "0") *out = false;
  else return Status::invalid_argument(setting + ": '" + value + "' is not on or off");
  return Status::OK();
}

const char* mode_name(CheckpointMode m) {
  switch (m) {
    case CheckpointMode::sync_any: return "sync_any";
    case CheckpointMode::sync_all: return "sync_all";
    case CheckpointMode::async: return "async";
  }
  return "?";
}

Status Settings::from_env(Settings* out, const std::function<const char*(const char*)>& getenv) {
  Settings s;
  auto get = [&](const char* var) -> std::string {
    const char* v = getenv(var);
    return v ? v : "";
  };
  if (std::string v = get("HYDRO_PAUSE"); !v.empty())
    HYDRO_RETURN_IF_ERROR(parse_on_off(v, "HYDRO_PAUSE", &s.pause));
  s.checkpoint_dir = get("HYDRO_CKPT_DIR");
  if (!s.checkpoint_dir.empty() && s.checkpoint_dir[0] != '/')
    return Status::invalid_argument("HYDRO_CKPT_DIR='" + s.checkpoint_dir + "' must be an absolute path");
  s.resume_from = get("HYDRO_RESUME_FROM");
  if (std::string v = get("HYDRO_CKPT_EVERY"); !v.empty())
    HYDRO_RETURN_IF_ERROR(parse_int("HYDRO_CKPT_EVERY", v, 0, INT64_MAX, &s.checkpoint_every));
  if (std::string v = get("HYDRO_KEEP_LAST"); !v.empty()) {
    int64_t k;
    HYDRO_RETURN_IF_ERROR(parse_int("HYDRO_KEEP_LAST", v, 0, 1000000, &k));
    s.keep_last = static_cast<int>(k);
  }
  if (std::string v = get("HYDRO_CUDA_RELEASE"); !v.empty())
    HYDRO_RETURN_IF_ERROR(parse_on_off(v, "HYDRO_CUDA_RELEASE", &s.cuda_release));
  if (std::string v = get("HYDRO_CKPT_DIRECT_IO"); !v.empty())
    HYDRO_RETURN_IF_ERROR(parse_on_off(v, "HYDRO_CKPT_DIRECT_IO", &s.direct_io));
  if (std::string v = get("HYDRO_SUSPEND_CHECKPOINT"); !v.empty()) {
    if (v == "auto") s.suspend_checkpoint = true;
    else if (v == "off") s.suspend_checkpoint = false;
    else return Status::invalid_argument("HYDRO_SUSPEND_CHECKPOINT='" + v + "' is not auto or off");
  }
  if (std::string v = get("HYDRO_CKPT_MODE"); !v.empty()) {
    if (v == "sync_any") s.mode = CheckpointMode::sync_any;
    else if (v == "sync_all") s.mode = CheckpointMode::sync_all;
    else if (v == "async") s.mode = CheckpointMode::async;
    else return Status::invalid_argument("HYDRO_CKPT_MODE='" + v + "' is not sync_any, sync_all or async");
  }
  if (std::string v = get("HYDRO_STORE_TIMEOUT"); !v.empty())
    HYDRO_RETURN_IF_ERROR(parse_int("HYDRO_STORE_TIMEOUT", v, 1, 7 * 24 * 3600, &s.store_timeout_s));
  HYDRO_RETURN_IF_ERROR(SignalMap::parse(get("HYDRO_SIGNALS"), "HYDRO_SIGNALS", &s.signals));
  DistEnv dist;
  HYDRO_RETURN_IF_ERROR(DistEnv::from_env(&dist, getenv));
  s.rank = dist.rank;
  s.world_size = dist.world_size;
  s.dist = dist;
  *out = std::move(s);
  return Status::OK();
}

Status Settings::from_env(Settings* out) {
  return from_env(out, [](const char* v) { return std::getenv(v); });
}

std::string default_checkpoint_dir_note() {
  const char* is_default = std::getenv("HYDRO_CKPT_DIR_DEFAULT");
  const char* dir = std::getenv("HYDRO_CKPT_DIR");
  if (!is_default || std::string(is_default) != "1" || !dir || !*dir) return "";
  return std::string("checkpoints go to ") + dir +
         ", hydro's default (<submit directory>/hydro-checkpoints/<job id>): neither --hydro-checkpoint-dir nor "
         "the admin's checkpoint_dir sets one";
}

}  // namespace hydro
