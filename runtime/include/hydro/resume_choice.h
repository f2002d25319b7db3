// Which checkpoint a rank resumes from.
//
// One rank: HYDRO_RESUME_FROM (chosen by hydro-launch in another process, verified again here,
// just before loading), else the newest valid checkpoint in HYDRO_CKPT_DIR.
// Several ranks that checkpoint together (a CheckpointGroup): always the newest step EVERY rank can
// load, agreed through the ranks' store, whatever hydro-launch chose. Each task's hydro-launch sees
// only its own node's directory: with node-local directories one task may find step 1000 and
// another only 500 (or none), and resuming each from its own would train ranks at different steps,
// or leave their collective rounds out of step until the store's timeout.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hydro/checkpoint_group.h"
#include "hydro/manifest.h"
#include "hydro/settings.h"

namespace hydro {

struct ResumeChoice {
  std::string path;   // the checkpoint directory; empty: start fresh at step 0
  Manifest manifest;  // its manifest (verified)
};

// `fs`: the checkpoint directories' filesystem. `group`: null for a rank that checkpoints alone. `log`
// takes warnings and notes for the user. `reshard`: a group may resume a checkpoint of another
// number of ranks (Runtime::allow_reshard), which rank r loads as rank (r mod its ranks).
Status choose_resume(Fs& fs, const Settings& settings, CheckpointGroup* group,
                     const std::function<void(const std::string&)>& log, ResumeChoice* out, bool reshard = false);

// The same file in every rank's shard of the checkpoint that holds `path`: for
// ROOT/step-N/rank-R/NAME, ROOT/step-N/rank-0/NAME and on, for its manifest's world_size (a
// resume onto another number of ranks reads them all); {path} for a file of an unsharded one.
Status rank_files(Fs& fs, const std::string& path, std::vector<std::string>* out);

}  // namespace hydro
