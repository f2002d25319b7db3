#include "hydro/settings.h"

#include <cstdlib>

#include "hydro/setting_schema.h"

namespace hydro {

Status parse_int(const char* var, const std::string& value, int64_t min, int64_t max, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  // The whole value: a NUL inside it (a YAML "\0") must not end the number early.
  if (value.empty() || end != value.c_str() + value.size() || errno == ERANGE)
    return Status::invalid_argument(std::string(var) + "='" + value + "' is not a whole number");
  if (v < min || v > max)
    return Status::invalid_argument(std::string(var) + "=" + value + " is out of range [" + std::to_string(min) + ", " +
                                    std::to_string(max) + "]");
  *out = v;
  return Status::OK();
}

Status parse_on_off(const std::string& value, const std::string& setting, bool* out) {
  if (value == "on" || value == "true" || value == "yes" || value == "1")
    *out = true;
  else if (value == "off" || value == "false" || value == "no" || value == "0")
    *out = false;
  else
    return Status::invalid_argument(setting + ": '" + value + "' is not on or off");
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

namespace {

using Getenv = std::function<const char*(const char*)>;

// A variable's value, checked against its row of the schema (hydro/setting_schema.h); "" if unset.
Status checked(const Getenv& getenv, const char* env, std::string* out) {
  const char* v = getenv(env);
  *out = v ? v : "";
  return out->empty() ? Status::OK() : check_setting(setting_row(env), *out, env);
}

Status read_on_off(const Getenv& getenv, const char* env, bool* out) {
  std::string v;
  HYDRO_RETURN_IF_ERROR(checked(getenv, env, &v));
  return v.empty() ? Status::OK() : parse_on_off(v, env, out);
}

template <typename Int>
Status read_number(const Getenv& getenv, const char* env, Int* out) {
  std::string v;
  HYDRO_RETURN_IF_ERROR(checked(getenv, env, &v));
  if (!v.empty()) *out = static_cast<Int>(std::stoll(v));
  return Status::OK();
}

// HYDRO_CUDA_RELEASE (on|off) became HYDRO_GPU_RELEASE: a job that still sets it is told so, rather
// than run without the release it asked for.
Status refuse_replaced(const Getenv& getenv) {
  const char* old = getenv("HYDRO_CUDA_RELEASE");
  if (!old || !*old) return Status::OK();
  return Status::invalid_argument(std::string("HYDRO_CUDA_RELEASE='") + old + "' is no longer read: set " +
                                  env_name(Setting::gpu_release) +
                                  "=cache instead (what HYDRO_CUDA_RELEASE=on did), or =full or =off");
}

}  // namespace

Status Settings::from_env(Settings* out, const Getenv& getenv) {
  Settings s;
  std::string v;
  HYDRO_RETURN_IF_ERROR(read_on_off(getenv, env_name(Setting::pause), &s.pause));
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::checkpoint_dir), &s.checkpoint_dir));
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::resume_from), &s.resume_from));
  HYDRO_RETURN_IF_ERROR(read_number(getenv, env_name(Setting::checkpoint_every), &s.checkpoint_every));
  HYDRO_RETURN_IF_ERROR(read_number(getenv, env_name(Setting::keep_last), &s.keep_last));
  HYDRO_RETURN_IF_ERROR(refuse_replaced(getenv));
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::gpu_release), &v));
  if (!v.empty()) gpu_release_from_name(v, &s.gpu_release);
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::gpu_allocator), &v));
  s.hydro_allocator = v == "hydro";
  HYDRO_RETURN_IF_ERROR(read_on_off(getenv, env_name(Setting::direct_io), &s.direct_io));
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::suspend_checkpoint), &v));
  if (!v.empty()) s.suspend_checkpoint = v == "auto";
  HYDRO_RETURN_IF_ERROR(read_number(getenv, env_name(Setting::suspend_grace), &s.suspend_grace_s));
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::async_copy), &v));
  s.copy_behind = v == "behind";
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::checkpoint_mode), &v));
  if (v == "sync_all")
    s.mode = CheckpointMode::sync_all;
  else if (v == "async")
    s.mode = CheckpointMode::async;
  HYDRO_RETURN_IF_ERROR(read_number(getenv, env_name(Setting::store_timeout), &s.store_timeout_s));
  HYDRO_RETURN_IF_ERROR(
      read_number(getenv, env_name(Setting::checkpoint_failure_grace), &s.checkpoint_failure_grace_s));
  HYDRO_RETURN_IF_ERROR(checked(getenv, env_name(Setting::signals), &v));
  HYDRO_RETURN_IF_ERROR(SignalMap::parse(v, env_name(Setting::signals), &s.signals));
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

Status Settings::pause_from_env(bool* pause) {
  *pause = Settings{}.pause;
  return read_on_off([](const char* v) { return std::getenv(v); }, env_name(Setting::pause), pause);
}

std::string default_checkpoint_dir_note() {
  const char* is_default = std::getenv("HYDRO_CKPT_DIR_DEFAULT");
  const char* dir = std::getenv(env_name(Setting::checkpoint_dir));
  if (!is_default || std::string(is_default) != "1" || !dir || !*dir) return "";
  return std::string("checkpoints go to ") + dir +
         ", hydro's default (<submit directory>/hydro-checkpoints/<job id>): neither --hydro-checkpoint-dir nor "
         "the admin's checkpoint_dir sets one";
}

}  // namespace hydro
