// For slurm.multi_rank_checkpoint: a rank killed in the middle of a save. Trains a tracked tensor
// for STEPS steps (checkpoints as HYDRO_CKPT_EVERY and HYDRO_CKPT_MODE say); the rank KILL_RANK
// dies (SIGKILL) after writing the first file of its checkpoint of step KILL_STEP, through the
// Runtime's filesystem (a FaultFs over the real one), not a hook in the library.
// Usage: hydro_kill_in_save KILL_RANK KILL_STEP STEPS
#include <hydro/runtime.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fault_fs.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s KILL_RANK KILL_STEP STEPS\n", argv[0]);
    return 2;
  }
  const int kill_rank = std::atoi(argv[1]);
  const std::string staging = "/.tmp-" + hydro::CheckpointDir::name_for(std::atoll(argv[2]));
  const int64_t steps = std::atoll(argv[3]);
  hydro::Settings settings;
  if (hydro::Status st = hydro::Settings::from_env(&settings); !st.ok()) {
    std::fprintf(stderr, "hydro_kill_in_save: %s\n", st.message().c_str());
    return 2;
  }
  hydro::test::FaultFs fs;
  int files = 0;
  if (settings.rank == kill_rank) {
    fs.on_new_writable = [&](const std::string& path) {
      if (path.find(staging) != std::string::npos && ++files == 2) ::raise(SIGKILL);
    };
  }
  hydro::Runtime hydro(settings, fs);
  torch::Tensor w = torch::zeros({1024});
  hydro.track("w", w);
  for (int64_t step = hydro.resume(); step < steps;) {
    w.add_(1);
    if (!hydro.step_end(++step)) return hydro::kExitRequeue;
  }
  std::printf("trained to step %lld\n", static_cast<long long>(steps));
  return 0;
}
