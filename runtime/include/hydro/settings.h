// The runtime's settings, read from the environment that the SPANK plugin and hydro-launch set.
// Every error names the variable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hydro/dist_env.h"
#include "hydro/gpu_release.h"
#include "hydro/signal_map.h"
#include "hydro/status.h"

namespace hydro {

// How the ranks of a job checkpoint (HYDRO_CKPT_MODE).
//   sync_any: at each step end the ranks vote; all checkpoint (and exit) when ANY rank asks
//             (SIGTERM, or the interval). Every rank writes its own shard, written in the
//             training thread; `latest` moves when every shard is durable.
//   sync_all: the same, but only when ALL ranks ask (each rank holds its request until then).
//   async:    no vote. The training thread copies the state into reused host buffers and a
//             background thread writes it; with several ranks only rank 0 writes.
// With one rank, sync_any and sync_all are the same plain synchronous checkpoint.
enum class CheckpointMode { sync_any, sync_all, async };
const char* mode_name(CheckpointMode m);

// Set by the plugin beside HYDRO_SUSPEND_GRACE: where Slurm's suspend grace time came from
// (slurm.conf, Slurm's default, the admin's suspend_grace_time), which the pause's log line quotes.
inline constexpr const char* kSuspendGraceFromEnv = "HYDRO_SUSPEND_GRACE_FROM";

struct Settings {
  bool pause = true;                         // HYDRO_PAUSE=on|off (set by --hydro-pause); on outside Slurm
  std::string checkpoint_dir;                // HYDRO_CKPT_DIR: absolute; empty = no checkpoints
  std::string resume_from;                   // HYDRO_RESUME_FROM: a checkpoint directory (set by hydro-launch)
  int64_t checkpoint_every = 0;              // HYDRO_CKPT_EVERY: steps between periodic checkpoints; 0 = none
  int keep_last = 3;                         // HYDRO_KEEP_LAST: committed checkpoints kept; 0 = all
  GpuRelease gpu_release = GpuRelease::off;  // HYDRO_GPU_RELEASE=off|cache|full: what a pause gives back
  bool hydro_allocator = false;              // HYDRO_GPU_ALLOCATOR=torch|hydro: full's memory in hydro's segments
  bool direct_io = true;                     // HYDRO_CKPT_DIRECT_IO=on|off: big checkpoint files bypass the page cache
  // HYDRO_SUSPEND_CHECKPOINT=auto|off: on SIGTSTP (scontrol suspend), when the rest of the step and
  // a checkpoint fit well inside the suspend grace time before SIGSTOP (measured: last step + last
  // checkpoint < 3/4 of it, 1.5 s of Slurm's default 2 s), the step finishes and a checkpoint
  // commits before the pause, so a job requeued while suspended (SIGKILL, no warning) loses
  // nothing. One rank, or several in sync_any/sync_all (every rank's must fit; they agree at each
  // step-end vote); not in async mode. Otherwise it pauses at the next operator as usual.
  bool suspend_checkpoint = true;
  // HYDRO_SUSPEND_GRACE: Slurm's suspend grace time, the seconds from a suspend's SIGTSTP to its
  // SIGSTOP or cgroup freeze (set by the plugin from slurm.conf; 2, Slurm's default, without it).
  int64_t suspend_grace_s = 2;  // (the plugin also sets kSuspendGraceFromEnv: where it came from)
  // Budget of a suspend checkpoint: the last step plus the last checkpoint must take under this.
  double suspend_checkpoint_budget_s() const { return 0.75 * static_cast<double>(suspend_grace_s); }
  SignalMap signals = SignalMap::defaults();       // HYDRO_SIGNALS
  int rank = 0;                                    // RANK or SLURM_PROCID (hydro/dist_env.h)
  int world_size = 1;                              // WORLD_SIZE or SLURM_STEP_NUM_TASKS
  CheckpointMode mode = CheckpointMode::sync_any;  // HYDRO_CKPT_MODE=sync_any|sync_all|async
  // HYDRO_ASYNC_COPY=save|behind: behind, async mode's copies of the state run after save() returns,
  // until the next optimizer step, which waits for them (Runtime::copy_behind(), the binding's).
  bool copy_behind = false;
  int64_t store_timeout_s = 1800;           // HYDRO_STORE_TIMEOUT: the longest wait for a peer rank
  int64_t checkpoint_failure_grace_s = 60;  // HYDRO_CKPT_FAILURE_GRACE (Runtime::save_tolerated)
  DistEnv dist;                             // rendezvous address: the ranks' store is MASTER_PORT + 1

  // `getenv` is injectable for tests.
  static Status from_env(Settings* out, const std::function<const char*(const char*)>& getenv);
  static Status from_env(Settings* out);
  // HYDRO_PAUSE alone, by from_env's rule (unset is on): for hydro-launch, which must not depend
  // on the program's other settings to know whether the program pauses.
  static Status pause_from_env(bool* pause);
};

// When the SPANK plugin chose hydro's default checkpoint directory (HYDRO_CKPT_DIR_DEFAULT=1: pause
// on, and neither the user nor the admin set one), the line that tells the user where their
// checkpoints go; otherwise "".
std::string default_checkpoint_dir_note();

// A whole number in [min, max]. `var` names the source in the error.
Status parse_int(const char* var, const std::string& value, int64_t min, int64_t max, int64_t* out);

// "on"/"off" (also true/false, yes/no, 1/0). `setting` names the source in the error.
Status parse_on_off(const std::string& value, const std::string& setting, bool* out);

}  // namespace hydro
