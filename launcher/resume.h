// hydro-launch's side of the resume: which checkpoint the program starts from.
#pragma once

#include <cstdint>

#include "supervisor.h"

namespace hydro::launcher {

// Sets HYDRO_RESUME_FROM (and HYDRO_CKPT_DIR) for the program from the newest valid checkpoint of
// --checkpoint-dir that holds this task's shard, and *resumed to its step (-1: none). False when
// the checkpoint directory cannot be used.
bool prepare_resume(const Options& o, int64_t* resumed);

// The newest valid checkpoint's step now; -1: none (or no directory).
int64_t newest_step(const Options& o);

}  // namespace hydro::launcher
