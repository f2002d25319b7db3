// Who this process is among the job's ranks, read from the environment: torchrun's
// RANK/WORLD_SIZE/LOCAL_RANK when set, else the Slurm step's SLURM_PROCID/SLURM_STEP_NUM_TASKS/
// SLURM_LOCALID (a batch script, outside any srun step, is one rank even under `sbatch -n 2`).
// The rendezvous address is MASTER_ADDR:MASTER_PORT. Under a Slurm step MASTER_ADDR defaults to
// 127.0.0.1 on one node, and on several to the first host of SLURM_STEP_NODELIST, where Slurm's
// block and cyclic distributions put rank 0 (with --distribution=arbitrary, set MASTER_ADDR);
// A job takes three ports from MASTER_PORT: torch's rendezvous, hydro's ranks' store (+1) and
// hydro-launch's restart group (+2). MASTER_PORT defaults to 20000 + 3 * (SLURM_JOB_ID % 4255):
// jobs with nearby ids (an array, a user's batch) on one node take ports apart, and all stay
// below 32768, where Linux's ephemeral ports (outgoing connections) begin. Errors name the variable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hydro/status.h"

namespace hydro {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;

  static constexpr int kPortsPerJob = 3;
  static constexpr int kDefaultPortBase = 20000;
  static constexpr int kDefaultPortSlots = 4255;              // 20000 + 3 * 4255 = 32765: below 32768
  int store_port() const { return master_port + 1; }          // the ranks' store (rank 0 serves it)
  int restart_group_port() const { return master_port + 2; }  // hydro-launch's, task 0 serves it

  static Status from_env(DistEnv* out, const std::function<const char*(const char*)>& getenv);
  static Status from_env(DistEnv* out);
};

// The first host of a Slurm host list: "node[03-04,7],gpu1" is node03.
std::string first_host(const std::string& nodelist);

}  // namespace hydro
