#include "hydro/setting_schema.h"

#include <stdexcept>

#include "hydro/settings.h"
#include "hydro/signal_map.h"
#include "hydro/text.h"

namespace hydro {

const std::vector<SettingRow>& settings_schema() {
  using K = SettingKind;
  static const std::vector<SettingRow> rows = {
      // Set by the admin (YAML, plugstack) or the user (option, environment) through the plugin.
      {"HYDRO_PAUSE", "default_pause", "hydro-pause", "on|off", K::on_off, 0, 0, nullptr, "on",
       "hydro: pause training at the next operator on suspend, and checkpoint before requeue [on|off]"},
      {"HYDRO_CKPT_DIR", "checkpoint_dir", "hydro-checkpoint-dir", "DIR", K::absolute_path, 0, 0, nullptr, "",
       "hydro: the job's checkpoint directory, an absolute path (default: the admin's, per job)"},
      {"HYDRO_CKPT_EVERY", "checkpoint_every", "hydro-checkpoint-every", "STEPS", K::whole_number, 0, INT64_MAX,
       nullptr, "0", "hydro: steps between periodic checkpoints; 0 = only when Slurm ends the job"},
      {"HYDRO_KEEP_LAST", "keep_last", "hydro-keep-last", "N", K::whole_number, 0, 1000000, nullptr, "3",
       "hydro: checkpoints kept; 0 = all"},
      {"HYDRO_CKPT_MODE", "checkpoint_mode", "hydro-checkpoint-mode", "sync_any|sync_all|async", K::choice, 0, 0,
       "sync_any|sync_all|async", "sync_any", "hydro: how the ranks checkpoint [sync_any|sync_all|async]"},
      {"HYDRO_MAX_RESTARTS", "max_restarts", "hydro-max-restarts", "N", K::whole_number, 0, 1000000, nullptr, "3",
       "hydro: the most times hydro-launch requeues the job itself"},
      {"HYDRO_RESTARTS", "restarts", "hydro-restarts", "N", K::whole_number, 0, 1000, nullptr, "0",
       "hydro: times hydro-launch starts a crashed or hung program again inside the job's allocation, from its "
       "newest checkpoint, before it requeues the job; 0 = never"},
      {"HYDRO_TIME_LIMIT_MARGIN", "time_limit_margin", "hydro-time-limit-margin", "SECONDS", K::whole_number, 0,
       365 * 24 * 3600, nullptr, "0",
       "hydro: hydro-launch checkpoints and requeues the job this long before its time limit; 0 = off"},
      {"HYDRO_SIGNALS", "signals", "hydro-signals", "MAP", K::signal_map, 0, 0, nullptr, "",
       "hydro: which signal asks for what, e.g. 'pause=PWR;resume=URG' (actions: pause, resume, checkpoint_exit, "
       "checkpoint); the runtime, hydro-launch and hydroctl all follow it"},
      {"HYDRO_GPU_RELEASE", "gpu_release", "hydro-gpu-release", "off|cache|full", K::choice, 0, 0, "off|cache|full",
       "off",
       "hydro: what a paused job gives back of its GPU: off = nothing; cache = the allocator's cached, unused "
       "memory; full = the whole device state, moved to host memory until it resumes [off|cache|full]"},
      // The admin's only: the plugin hands each task Slurm's own (slurm.conf), and this where that cannot be read.
      {"HYDRO_SUSPEND_GRACE", "suspend_grace_time", nullptr, "SECONDS", K::whole_number, 0, 3600, nullptr, "2",
       "Slurm's suspend grace time, between a suspend's SIGTSTP and its freeze: the pause, the suspend checkpoint and "
       "the GPU release fit in it (the plugin reads slurm.conf's PreemptParameters=suspend_grace_time)"},
      // The runtime's own: the user's environment only.
      {"HYDRO_CKPT_DIRECT_IO", nullptr, nullptr, "on|off", K::on_off, 0, 0, nullptr, "on",
       "big checkpoint files bypass the page cache (O_DIRECT) where the filesystem takes it"},
      {"HYDRO_SUSPEND_CHECKPOINT", nullptr, nullptr, "auto|off", K::choice, 0, 0, "auto|off", "auto",
       "on SIGTSTP, finish the step and checkpoint before pausing when both fit well inside Slurm's suspend grace "
       "time (HYDRO_SUSPEND_GRACE)"},
      {"HYDRO_STORE_TIMEOUT", nullptr, nullptr, "SECONDS", K::whole_number, 1, 7 * 24 * 3600, nullptr, "1800",
       "the longest a rank waits for its peers"},
      {"HYDRO_CKPT_FAILURE_GRACE", nullptr, nullptr, "SECONDS", K::whole_number, 0, 7 * 24 * 3600, nullptr, "60",
       "how long checkpoints training can go on without (every N steps, requested, before a suspend) may keep "
       "failing before the step fails; it fails at the third failure in a row that is this long after the first"},
      {"HYDRO_RESUME_FROM", nullptr, nullptr, "DIR", K::absolute_path, 0, 0, nullptr, "",
       "the checkpoint to resume from (hydro-launch sets it)"},
      {"HYDRO_ASYNC_COPY", nullptr, nullptr, "save|behind", K::choice, 0, 0, "save|behind", "save",
       "async mode: save = rt.save() returns once the state is copied; behind = the copies run behind the next "
       "forward and backward, and the next optimizer step waits for them (Python, with an optimizer tracked: "
       "change tracked tensors only by an optimizer's step)"},
      {"HYDRO_GPU_ALLOCATOR", nullptr, nullptr, "torch|hydro", K::choice, 0, 0, "torch|hydro", "torch",
       "with HYDRO_GPU_RELEASE=full: hydro = the Runtime routes libtorch's CUDA allocations on the current device, "
       "from every thread, to segments hydro maps itself, which a pause moves to pinned host memory at the link's "
       "speed (create the Runtime before the model goes to the GPU); torch = libtorch's own, moved by the driver's "
       "process checkpoint. Not yet run on a GPU (issue 57)"},
  };
  return rows;
}

const SettingRow& setting_row(Setting s) {
  const auto& rows = settings_schema();
  const auto i = static_cast<size_t>(s);
  if (i >= rows.size()) throw std::logic_error("hydro: setting " + std::to_string(i) + " has no row in the schema");
  return rows[i];
}

const SettingRow& setting_row(std::string_view env) {
  for (const auto& row : settings_schema())
    if (env == row.env) return row;
  throw std::logic_error("hydro: no setting " + std::string(env) + " in the schema");
}

namespace {

// "a|b|c" -> "a, b or c"
std::string alternatives(const std::vector<std::string>& choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i) s += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return s;
}

}  // namespace

Status check_setting(const SettingRow& row, const std::string& value, const std::string& where) {
  switch (row.kind) {
    case SettingKind::on_off: {
      bool ignored;
      return parse_on_off(value, where, &ignored);
    }
    case SettingKind::whole_number: {
      int64_t ignored;
      return parse_int(where.c_str(), value, row.min, row.max, &ignored);
    }
    case SettingKind::absolute_path:
      if (value.empty() || value[0] != '/')
        return Status::invalid_argument(where + "='" + value + "' must be an absolute path");
      return Status::OK();
    case SettingKind::choice: {
      const std::vector<std::string> choices = split(row.choices, '|');
      for (const auto& c : choices)
        if (value == c) return Status::OK();
      return Status::invalid_argument(where + "='" + value + "' is not " + alternatives(choices));
    }
    case SettingKind::signal_map: {
      SignalMap ignored;
      return SignalMap::parse(value, where, &ignored);
    }
  }
  return Status::invalid_argument(where + ": unknown kind of setting");
}

}  // namespace hydro
