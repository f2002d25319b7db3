// spank_hydro.so: the exported SPANK hooks. Each is thin and catches everything: no exception
// ever unwinds into srun, sbatch, slurmd or slurmstepd.
//
//   slurm_spank_init   every context: reads the admin's config (plugstack arguments, YAML) and
//                      registers the --hydro-* options (srun, sbatch, salloc, slurmstepd). In
//                      slurmd (once, at its start) it logs hydro's version and Slurm's.
//   option callbacks   validate at submit time; in slurmstepd they run again (twice), so they
//                      only ever assign.
//   slurm_spank_task_init  per task, as the job's user: the HYDRO_* variables the runtime and
//                      hydro-launch read, the per-job checkpoint directory (job_dir.h), the
//                      pause signals blocked until a runtime handles them, and with
//                      --hydro-launch (Slurm 23.11 and later) the task run under hydro-launch.
//   slurm_spank_task_exit  per task, in slurmstepd as root: a task that exits kExitRequeueJob
//                      (hydro-launch that could not requeue: no scontrol in a container) has its
//                      job requeued from the host, once.
extern "C" {
#include <slurm/spank.h>
#include <slurm/slurm.h>
#include <slurm/slurm_version.h>
}

#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hydro/exit_codes.h"
#include "hydro/launch_ready.h"
#include "hydro/settings.h"
#include "hydro/setting_schema.h"
#include "hydro/signal_map.h"
#include "hydro/version.h"
#include "admin_config.h"
#include "job_dir.h"
#include "suspend_grace.h"

// Built with -fvisibility=hidden: only what is marked here is exported (see exports.map too).
#define HYDRO_EXPORT __attribute__((visibility("default")))

extern "C" {
HYDRO_EXPORT extern const char plugin_name[] = "hydro";
HYDRO_EXPORT extern const char plugin_type[] = "spank";
HYDRO_EXPORT extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 5, 0)
// A failed slurm_spank_init fails the job, never drains the node (Slurm's default for a `required`
// plugin): hydro's init fails only for the job's own reasons (a --hydro option it cannot register,
// an internal error), and a bad admin config fails each job step in task_init with its cause,
// while slurmd goes on. Slurm 25.05 added the choice.
HYDRO_EXPORT int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;  // declared extern "C" in spank.h
#endif
}

namespace {

using hydro::env_name;
using hydro::Setting;
using hydro::Status;
using hydro::admin::job_setting_specs;

hydro::admin::PluginConfig g_config;
hydro::admin::JobSettings g_options;  // from the command line
hydro::spank::SuspendGrace g_grace;   // this step's (slurmstepd: read_suspend_grace)
bool g_config_ok = true;
std::string g_config_error;

int on_option(int index, const char* optarg, int) {
  try {
    const auto& spec = job_setting_specs().at(static_cast<size_t>(index));
    std::string where = std::string("--") + spec.option;
    Status st = hydro::admin::parse_job_setting(spec, optarg ? optarg : "", where, false, &g_options);
    if (!st.ok()) {
      slurm_error("hydro: option: %s", st.message().c_str());
      return -1;
    }
    return 0;
  } catch (...) {
    slurm_error("hydro: option: internal error while parsing a --hydro option");
    return -1;
  }
}

// --hydro-launch: each task runs under hydro-launch (`hydro-launch -- TASK...`), found on the task's
// PATH (a container's, with pyxis), through spank_prepend_task_argv, which Slurm 23.11 added.
#define HYDRO_CAN_PREPEND_ARGV (SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 11, 0))
bool g_launch = false;

int on_launch_option(int, const char*, int) {
  if (!HYDRO_CAN_PREPEND_ARGV) {
    slurm_error(
        "hydro: option: --hydro-launch needs Slurm 23.11 or later (spank_prepend_task_argv), and this "
        "plugin is built for Slurm %d.%02d: run `srun hydro-launch -- PROGRAM ...` instead",
        SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER), SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER));
    return -1;
  }
  g_launch = true;
  return 0;
}

std::vector<spank_option>& options() {
  static std::vector<spank_option> opts = [] {
    std::vector<spank_option> v;
    const auto& specs = job_setting_specs();
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].option)  // the admin's alone (suspend_grace_time) have none
        v.push_back({const_cast<char*>(specs[i].option), const_cast<char*>(specs[i].arginfo),
                     const_cast<char*>(specs[i].help), 1, static_cast<int>(i), on_option});
    v.push_back({const_cast<char*>("hydro-launch"), nullptr,
                 const_cast<char*>("Run each task under hydro-launch, found on the task's PATH (Slurm 23.11 and "
                                   "later; the same as `hydro-launch -- PROGRAM ...`)"),
                 0, static_cast<int>(specs.size()), on_launch_option});
    return v;
  }();
  return opts;
}

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

int set_env(spank_t sp, const char* var, const std::string& value) {
  spank_err_t rc = spank_setenv(sp, var, value.c_str(), 1);
  if (rc != ESPANK_SUCCESS) {
    slurm_error("hydro: task_init: cannot set %s: %s", var, spank_strerror(rc));
    return -1;
  }
  return 0;
}

bool env_set(spank_t sp, const char* var) {
  char buf[4096];
  return spank_getenv(sp, var, buf, sizeof buf) == ESPANK_SUCCESS;
}

// The admin's checkpoint_dir for this job, made as the job's user (task_init runs as the user).
int job_dir(spank_t sp, const std::string& job, std::string* dir) {
  uid_t uid = 0;
  spank_get_item(sp, S_JOB_UID, &uid);
  struct passwd pw, *res = nullptr;
  std::vector<char> buf(16384);
  std::string user = std::to_string(uid);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) == 0 && res) user = res->pw_name;
  Status st = hydro::spank::make_job_dir(*g_config.defaults.get("checkpoint_dir"), user, uid,
                                         static_cast<unsigned>(std::stoul(job.empty() ? "0" : job)), dir);
  if (!st.ok()) {
    slurm_error("hydro: task_init: %s", st.message().c_str());
    return -1;
  }
  return 0;
}

std::string get_env(spank_t sp, const char* var) {
  char buf[4096];
  return spank_getenv(sp, var, buf, sizeof buf) == ESPANK_SUCCESS ? buf : "";
}

// Pause on and no checkpoint directory from anyone: a requeue would silently lose all work. Use
// <submit dir>/hydro-checkpoints/<job id> (hydro/job_dir.h), made as the job's user; the runtime
// and hydro-launch announce it (HYDRO_CKPT_DIR_DEFAULT). If it cannot be made, the job runs as
// before, and the runtime says loudly on SIGTERM that nothing is saved.
int default_checkpoint_dir(spank_t sp, const std::string& job) {
  if (env_set(sp, env_name(Setting::checkpoint_dir))) return 0;
  bool pause = false;
  if (!hydro::parse_on_off(get_env(sp, env_name(Setting::pause)), env_name(Setting::pause), &pause).ok() || !pause)
    return 0;
  std::string dir;
  Status st = hydro::spank::make_default_job_dir(get_env(sp, "SLURM_SUBMIT_DIR"),
                                                 static_cast<unsigned>(std::stoul(job.empty() ? "0" : job)), &dir);
  if (!st.ok()) {
    slurm_info("hydro: task_init: no default checkpoint directory: %s", st.message().c_str());
    return 0;
  }
  if (set_env(sp, env_name(Setting::checkpoint_dir), dir)) return -1;
  return set_env(sp, "HYDRO_CKPT_DIR_DEFAULT", "1");
}

// With pause on, the task (and all it starts: the batch shell, a `tee`, the program before its
// runtime is up) holds the pause signals (blocked and ignored), so that `hydroctl pause` (scancel, steps and batch) or
// a pause signal in the job's first second waits instead of killing it (SignalMap:: blocked_until_handled).
void block_pause_signals(spank_t sp) {
  hydro::SignalMap::hold(hydro::SignalMap::blocked_for_job(get_env(sp, env_name(Setting::pause)),
                                                           get_env(sp, env_name(Setting::signals))));
}

// --hydro-launch: `hydro-launch --` before the task's argv, unless the task already runs under one
// of this job's (a step that a batch script run by hydro-launch starts: HYDRO_LAUNCH_JOB is this
// job's id; a job that such a script submits is another job, and is wrapped).
int wrap_in_launcher(spank_t sp, const std::string& job) {
  if (get_env(sp, hydro::kLaunchJobEnv) == job) return 0;
#if HYDRO_CAN_PREPEND_ARGV
  const char* argv[] = {"hydro-launch", "--"};
  spank_err_t rc = spank_prepend_task_argv(sp, 2, argv);
  if (rc != ESPANK_SUCCESS) {
    slurm_error("hydro: task_init: --hydro-launch: cannot run the task under hydro-launch: %s", spank_strerror(rc));
    return -1;
  }
#endif
  return 0;
}

// Where a job's setting comes from: the first of its --hydro-* option, the job's environment (set,
// even to ""), and the admin's default; `none` where none sets it.
enum class SettingFrom { option, environment, admin, none };
std::pair<std::string, SettingFrom> job_setting(spank_t sp, const hydro::admin::SettingSpec& spec) {
  std::string v = hydro::admin::job_setting_value(g_options, spec);
  if (!v.empty()) return {v, SettingFrom::option};
  if (env_set(sp, spec.env)) return {get_env(sp, spec.env), SettingFrom::environment};
  v = hydro::admin::job_setting_value(g_config.defaults, spec);
  return {v, v.empty() ? SettingFrom::none : SettingFrom::admin};
}

int task_init(spank_t sp) {
  if (!g_config_ok) {
    slurm_error("hydro: task_init: the admin's hydro config is invalid, so the job cannot start: %s",
                g_config_error.c_str());
    return -1;
  }
  std::string job = item_u32(sp, S_JOB_ID);
  uint32_t step = 0;
  spank_get_item(sp, S_JOB_STEPID, &step);
  std::string restart = item_u32(sp, S_SLURM_RESTART_COUNT);
  if (set_env(sp, "HYDRO_JOB_ID", job)) return -1;
  if (set_env(sp, "HYDRO_STEP_ID", step == SLURM_BATCH_SCRIPT ? "batch" : std::to_string(step))) return -1;
  if (set_env(sp, "HYDRO_RESTART_COUNT", restart.empty() ? "0" : restart)) return -1;

  if (set_env(sp, env_name(Setting::suspend_grace), std::to_string(g_grace.seconds))) return -1;
  if (set_env(sp, hydro::kSuspendGraceFromEnv, g_grace.from)) return -1;
  for (const auto& spec : job_setting_specs()) {
    if (spec.env == std::string(env_name(Setting::suspend_grace))) continue;  // Slurm's, set above
    auto [value, from] = job_setting(sp, spec);
    if (from == SettingFrom::environment) continue;  // the job's own, there already
    // The admin's checkpoint_dir is a template: this job's directory, made for it.
    if (from == SettingFrom::admin && std::string(spec.key) == "checkpoint_dir" && job_dir(sp, job, &value)) return -1;
    if (from == SettingFrom::none && std::string(spec.key) == "default_pause") value = "off";
    if (!value.empty() && set_env(sp, spec.env, value)) return -1;
  }
  if (default_checkpoint_dir(sp, job)) return -1;
  block_pause_signals(sp);
  return g_launch ? wrap_in_launcher(sp, job) : 0;
}

// Whether the job asked for hydro: --hydro-launch, any --hydro-* option (sbatch's reach its steps)
// but --hydro-pause=off, or a pause that is on (HYDRO_PAUSE=on in the job's environment, or the
// admin's default_pause=on). Not the other HYDRO_* variables of a step's environment: in a batch
// job, the plugin set them all in the batch script's, from the admin's defaults.
bool hydro_on(spank_t sp) {
  if (g_launch) return true;
  const std::string pause_env = env_name(Setting::pause);
  for (const auto& spec : job_setting_specs()) {
    if (spec.env == pause_env && job_setting(sp, spec).first == "on") return true;
    if (spec.env != pause_env && !hydro::admin::job_setting_value(g_options, spec).empty()) return true;
  }
  return false;
}

// Requeues the job from the host (slurmstepd, as root) for a task that exited kExitRequeueJob.
// Exactly once per event whoever else asks: Slurm makes a requeued job pending at once, and
// refuses every later requeue of it with ESLURM_JOB_PENDING (hydro-launch's scontrol, another
// node's plugin), and a RequeueExit that matches the batch script's status then finds it pending;
// a step ends (and its task_exit with it) before the job can start again.
void requeue_from_host(uint32_t job, uint32_t task) {
  errno = 0;
  if (slurm_requeue(job, 0) == SLURM_SUCCESS) {
    slurm_info("hydro: task %u of job %u exited %d (checkpointed, requeue asked where no scontrol could): job requeued",
               task, job, hydro::kExitRequeueJob);
    return;
  }
  const int err = errno;
  if (err == ESLURM_JOB_PENDING) {
    slurm_info("hydro: task %u of job %u exited %d: the job is requeued already", task, job, hydro::kExitRequeueJob);
    return;
  }
  slurm_error(
      "hydro: task %u of job %u exited %d to be requeued, and Slurm refused: %s (a batch job submitted "
      "with --requeue, or JobRequeue=1, can be)",
      task, job, hydro::kExitRequeueJob, slurm_strerror(err));
}

int task_exit(spank_t sp) {
  static bool asked = false;  // once per step: Slurm keeps it once per job (requeue_from_host)
  int status = 0;
  if (asked || spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS) return 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != hydro::kExitRequeueJob || !hydro_on(sp)) return 0;
  asked = true;
  uint32_t job = 0, task = 0;
  spank_get_item(sp, S_JOB_ID, &job);
  spank_get_item(sp, S_TASK_GLOBAL_ID, &task);
  requeue_from_host(job, task);
  return 0;
}

// slurmd loads the plugstack once, when it starts (slurm_spank_init in S_CTX_SLURMD; Slurm 22.05
// calls no slurm_spank_slurmd_init): its log then names the hydro it runs.
void log_version_in_slurmd(int ac, char** av) {
  std::string args;
  for (int i = 0; i < ac; ++i) args += std::string(" ") + av[i];
  slurm_info("hydro %s: spank_hydro.so (built for Slurm %d.%02d) loaded with:%s", hydro::version(),
             SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER), SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER),
             args.empty() ? " no arguments" : args.c_str());
}

// slurmstepd, once per step, as root: Slurm's suspend grace time from the slurm.conf slurmd read
// (slurmd puts its path in SLURM_CONF), or the admin's suspend_grace_time where it cannot be read.
void read_suspend_grace() {
  std::optional<int64_t> admin;
  if (auto v = g_config.defaults.get("suspend_grace_time")) admin = std::stoll(*v);
  const char* conf = std::getenv("SLURM_CONF");
  g_grace = hydro::spank::suspend_grace(SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER),
                                        SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER), conf ? conf : "", admin);
  slurm_verbose("hydro: init: suspend grace time %lld s, from %s", static_cast<long long>(g_grace.seconds),
                g_grace.from.c_str());
}

}  // namespace

extern "C" HYDRO_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  return guarded("init", [&] {
    std::vector<std::string> args(av, av + ac);
    spank_context_t ctx = spank_context();
    if (ctx == S_CTX_SLURMD) log_version_in_slurmd(ac, av);
    Status st = hydro::admin::PluginConfig::parse(args, "plugstack.conf", &g_config);
    if (!st.ok()) {
      slurm_error("hydro: init: %s", st.message().c_str());
      // slurmd and the prolog/epilog would stop or drain the node on a failure: the admin sees the
      // error in the log, and each job step fails in task_init with it instead.
      if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE) return 0;
      if (ctx == S_CTX_REMOTE) {
        g_config_ok = false;
        g_config_error = st.message();
      } else {
        return -1;  // srun, sbatch, salloc: the user sees it at submit time
      }
    }
    if (ctx == S_CTX_REMOTE) read_suspend_grace();
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE || ctx == S_CTX_ALLOCATOR) {
      for (auto& opt : options()) {
        spank_err_t rc = spank_option_register(sp, &opt);
        if (rc != ESPANK_SUCCESS) {
          slurm_error("hydro: init: cannot register --%s: %s", opt.name, spank_strerror(rc));
          return -1;
        }
      }
    }
    return 0;
  });
}

extern "C" HYDRO_EXPORT int slurm_spank_task_init(spank_t sp, int, char**) {
  return guarded("task_init", [&] { return task_init(sp); });
}

extern "C" HYDRO_EXPORT int slurm_spank_task_exit(spank_t sp, int, char**) {
  return guarded("task_exit", [&] { return task_exit(sp); });
}
