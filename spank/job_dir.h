// The per-job checkpoint directory from the admin's template (checkpoint_dir=/scratch/hydro/%u/%j),
// made by the plugin in task_init, which runs as the job's user: the user's privileges, mode 0700.
//
// The template's fixed prefix (the components before the first %-escape, /scratch/hydro) is the
// admin's and must exist. Each later component is made with mkdirat and opened with O_NOFOLLOW
// from its parent's descriptor, so a symlink swapped in by anyone is refused, never followed; and
// each must be a directory owned by the job's user. A world-writable prefix must have the sticky
// bit, or another user could rename the job's directory away.
#pragma once

#include <string>
#include <sys/types.h>

#include "hydro/status.h"

namespace hydro::spank {

// Makes the directory for (user, uid, job_id) and returns its path in `out`. Ownership is checked
// against the effective uid (the job's user in task_init).
Status make_job_dir(const std::string& tmpl, const std::string& user, uid_t uid, unsigned job_id, std::string* out);

// hydro's default when neither the user (--hydro-checkpoint-dir, HYDRO_CKPT_DIR) nor the admin
// (checkpoint_dir) set a directory and pause is on: <submit dir>/hydro-checkpoints/<job id>, made
// the same way (the submit directory is the user's own: its symlinks are followed). A requeued job
// keeps its id, so it finds its checkpoints there.
inline constexpr const char* kDefaultDirName = "hydro-checkpoints";
Status make_default_job_dir(const std::string& submit_dir, unsigned job_id, std::string* out);

}  // namespace hydro::spank
