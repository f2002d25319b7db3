// spank_hydro.so: the exported SPANK hooks. Each is thin and catches everything: no exception
// ever unwinds into srun, sbatch, slurmd or slurmstepd.
extern "C" {
#include <slurm/spank.h>
#include <slurm/slurm.h>
#include <slurm/slurm_version.h>
}

#include <pwd.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "hydro/settings.h"
#include "plugin_config.h"

// Built with -fvisibility=hidden: only what is marked here is exported (see exports.map too).
#define HYDRO_EXPORT __attribute__((visibility("default")))

extern "C" {
HYDRO_EXPORT extern const char plugin_name[] = "hydro";
HYDRO_EXPORT extern const char plugin_type[] = "spank";
HYDRO_EXPORT extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
}

namespace {

using hydro::Status;

hydro::spank::PluginConfig g_config;
std::optional<bool> g_pause;  // from --hydro-pause; callbacks may run twice, so only ever assign

int on_pause_option(int, const char* optarg, int) {
  try {
    bool on = false;
    Status st = hydro::parse_on_off(optarg ? optarg : "", "--hydro-pause", &on);
    if (!st.ok()) {
      slurm_error("hydro: option: %s (use --hydro-pause=on or --hydro-pause=off)", st.message().c_str());
      return -1;
    }
    g_pause = on;
    return 0;
  } catch (...) {
    slurm_error("hydro: option: internal error while parsing --hydro-pause");
    return -1;
  }
}

struct spank_option g_pause_option = {
    const_cast<char*>("hydro-pause"), const_cast<char*>("on|off"),
    const_cast<char*>("hydro: pause training at the next operator on suspend, and checkpoint before requeue "
                      "[on|off]"),
    1, 0, on_pause_option};

template <typename F>
int guarded(const char* phase, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    slurm_error("hydro: %s: internal error: %s", phase, e.what());
  } catch (...) {
    slurm_error("hydro: %s: internal error", phase);
  }
  return -1;
}

std::string item_u32(spank_t sp, spank_item_t item) {
  uint32_t v = 0;
  if (spank_get_item(sp, item, &v) != ESPANK_SUCCESS) return "";
  return std::to_string(v);
}

int set_env(spank_t sp, const char* var, const std::string& value, bool overwrite) {
  spank_err_t rc = spank_setenv(sp, var, value.c_str(), overwrite ? 1 : 0);
  if (rc != ESPANK_SUCCESS && rc != ESPANK_ENV_EXISTS) {
    slurm_error("hydro: task_init: cannot set %s: %s", var, spank_strerror(rc));
    return -1;
  }
  return 0;
}

bool env_set(spank_t sp, const char* var) {
  char buf[4096];
  return spank_getenv(sp, var, buf, sizeof buf) == ESPANK_SUCCESS;
}

int task_init(spank_t sp) {
  // Command line beats the environment, which beats the admin's default.
  if (g_pause) {
    if (set_env(sp, "HYDRO_PAUSE", *g_pause ? "on" : "off", true)) return -1;
  } else if (!env_set(sp, "HYDRO_PAUSE")) {
    if (set_env(sp, "HYDRO_PAUSE", g_config.default_pause ? "on" : "off", true)) return -1;
  }
  std::string job = item_u32(sp, S_JOB_ID);
  uint32_t step = 0;
  spank_get_item(sp, S_JOB_STEPID, &step);
  std::string restart = item_u32(sp, S_SLURM_RESTART_COUNT);
  if (set_env(sp, "HYDRO_JOB_ID", job, true)) return -1;
  if (set_env(sp, "HYDRO_STEP_ID", step == SLURM_BATCH_SCRIPT ? "batch" : std::to_string(step), true)) return -1;
  if (set_env(sp, "HYDRO_RESTART_COUNT", restart.empty() ? "0" : restart, true)) return -1;
  if (!g_config.checkpoint_dir.empty()) {
    uid_t uid = 0;
    spank_get_item(sp, S_JOB_UID, &uid);
    struct passwd pw, *res = nullptr;
    std::vector<char> buf(16384);
    std::string user = std::to_string(uid);
    if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) == 0 && res) user = res->pw_name;
    std::string dir;
    Status st = hydro::spank::expand_template(g_config.checkpoint_dir, user, uid,
                                              static_cast<unsigned>(std::stoul(job.empty() ? "0" : job)), &dir);
    if (!st.ok()) {
      slurm_error("hydro: task_init: %s", st.message().c_str());
      return -1;
    }
    if (set_env(sp, "HYDRO_CKPT_DIR", dir, false)) return -1;
  }
  return 0;
}

}  // namespace

extern "C" HYDRO_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  return guarded("init", [&] {
    std::vector<std::string> args(av, av + ac);
    Status st = hydro::spank::PluginConfig::parse(args, "plugstack.conf", &g_config);
    if (!st.ok()) {
      slurm_error("hydro: init: %s", st.message().c_str());
      return -1;
    }
    spank_context_t ctx = spank_context();
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE || ctx == S_CTX_ALLOCATOR) {
      spank_err_t rc = spank_option_register(sp, &g_pause_option);
      if (rc != ESPANK_SUCCESS) {
        slurm_error("hydro: init: cannot register --hydro-pause: %s", spank_strerror(rc));
        return -1;
      }
    }
    return 0;
  });
}

extern "C" HYDRO_EXPORT int slurm_spank_task_init(spank_t sp, int, char**) {
  return guarded("task_init", [&] { return task_init(sp); });
}
