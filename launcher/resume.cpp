#include "resume.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "hydro/checkpoint_dir.h"
#include "hydro/dist_env.h"
#include "say.h"
#include "hydro/settings.h"
#include "hydro/setting_schema.h"

namespace hydro::launcher {
namespace {

// Whether `found` (verified) holds this task's rank's shard. A node-local directory holds only the
// shards of the ranks that ran on this host; after a requeue onto other hosts it may hold other
// ranks' shards alone. The ranks' runtimes then agree on what to do (hydro/resume_choice.h).
bool holds_own_shard(const CheckpointDir& dir, const CheckpointInfo& found) {
  DistEnv env;
  Manifest m;
  if (!DistEnv::from_env(&env).ok() || !dir.read_manifest(found.name, &m).ok() || m.holds_shard(env.rank)) return true;
  say("the newest checkpoint here, step " + std::to_string(found.step) + ", holds other ranks' shards, not rank " +
      std::to_string(env.rank) + "'s: the ranks agree on where to resume");
  return false;
}

}  // namespace

bool prepare_resume(const Options& o, int64_t* resumed) {
  *resumed = -1;
  ::unsetenv(env_name(Setting::resume_from));
  if (o.checkpoint_dir.empty()) {
    say("no checkpoint directory (--checkpoint-dir or HYDRO_CKPT_DIR): the program starts fresh");
    return true;
  }
  // --checkpoint-dir replaces the plugin's default: it is no longer hydro's default then.
  if (const char* env = std::getenv(env_name(Setting::checkpoint_dir)); !env || o.checkpoint_dir != env)
    ::unsetenv("HYDRO_CKPT_DIR_DEFAULT");
  ::setenv(env_name(Setting::checkpoint_dir), o.checkpoint_dir.c_str(), 1);
  if (std::string note = default_checkpoint_dir_note(); !note.empty()) say(note);
  CheckpointDir dir(o.checkpoint_dir);
  Status st = dir.open();
  if (!st.ok()) {
    say("error: checkpoint directory: " + st.message());
    return false;
  }
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  st = dir.latest_valid(&found, &warnings);
  for (const auto& w : warnings) say("warning: " + w);
  if (!found) {
    say("no valid checkpoint in " + o.checkpoint_dir + ": the program starts fresh");
    return true;
  }
  if (!holds_own_shard(dir, *found)) return true;
  *resumed = found->step;
  ::setenv(env_name(Setting::resume_from), found->path.c_str(), 1);
  say("resuming from step " + std::to_string(found->step) + " (" + found->path + ")");
  return true;
}

int64_t newest_step(const Options& o) {
  if (o.checkpoint_dir.empty()) return -1;
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  if (!CheckpointDir(o.checkpoint_dir).latest_valid(&found, &warnings).ok() || !found) return -1;
  return found->step;
}

}  // namespace hydro::launcher
