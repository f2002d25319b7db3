#include "hydro/dist_env.h"

#include <cstdlib>

#include "hydro/settings.h"

namespace hydro {
namespace {

Status read_int(const char* var, const char* value, long min, long max, int* out) {
  int64_t v = 0;
  HYDRO_RETURN_IF_ERROR(parse_int(var, value, min, max, &v));
  *out = static_cast<int>(v);
  return Status::OK();
}

}  // namespace

std::string first_host(const std::string& nodelist) {
  std::string out;
  bool in_brackets = false, skipping = false;
  for (char c : nodelist) {
    if (!in_brackets && c == ',') break;  // the first name ends
    if (c == '[') {
      in_brackets = true;
      skipping = false;
    } else if (c == ']') {
      in_brackets = false;
    } else if (in_brackets && (c == ',' || c == '-')) {
      skipping = true;  // past the first number of the range
    } else if (!skipping || !in_brackets) {
      out += c;
    }
  }
  return out;
}

Status DistEnv::from_env(DistEnv* out, const std::function<const char*(const char*)>& getenv) {
  DistEnv d;
  const bool torchrun = getenv("RANK") || getenv("WORLD_SIZE");
  const char* rank_var = torchrun ? "RANK" : "SLURM_PROCID";
  // Not SLURM_NTASKS: the batch script of `sbatch -n 2` has SLURM_NTASKS=2 but is one process.
  const char* world_var = torchrun ? "WORLD_SIZE" : "SLURM_STEP_NUM_TASKS";
  const char* local_var = torchrun ? "LOCAL_RANK" : "SLURM_LOCALID";
  if (const char* v = getenv(world_var)) HYDRO_RETURN_IF_ERROR(read_int(world_var, v, 1, 1 << 20, &d.world_size));
  if (const char* v = getenv(rank_var)) HYDRO_RETURN_IF_ERROR(read_int(rank_var, v, 0, 1 << 20, &d.rank));
  if (d.rank >= d.world_size)
    return Status::invalid_argument(std::string(rank_var) + "=" + std::to_string(d.rank) + " is not below " +
                                    world_var + "=" + std::to_string(d.world_size));
  if (const char* v = getenv(local_var)) HYDRO_RETURN_IF_ERROR(read_int(local_var, v, 0, 1 << 20, &d.local_rank));
  if (const char* v = getenv("MASTER_ADDR"); v && *v) {
    d.master_addr = v;
  } else if (d.world_size > 1) {
    const char* nodes = getenv("SLURM_STEP_NUM_NODES");
    if (!nodes)
      return Status::invalid_argument("MASTER_ADDR is not set: with " + std::to_string(d.world_size) +
                                      " ranks outside a one-node Slurm step, name the host of rank 0");
    const char* list = getenv("SLURM_STEP_NODELIST");
    const bool several = std::string(nodes) != "1";
    if (several && !(list && *list))
      return Status::invalid_argument(
          "MASTER_ADDR is not set: ranks on several nodes need the rendezvous host "
          "(for example the first of `scontrol show hostnames $SLURM_JOB_NODELIST`)");
    if (several) d.master_addr = first_host(list);
  }
  if (const char* v = getenv("MASTER_PORT"); v && *v) {
    // Not above 65533: hydro takes the two ports after it.
    HYDRO_RETURN_IF_ERROR(read_int("MASTER_PORT", v, 1, 65536 - DistEnv::kPortsPerJob, &d.master_port));
  } else if (const char* job = getenv("SLURM_JOB_ID")) {
    int id = 0;
    HYDRO_RETURN_IF_ERROR(read_int("SLURM_JOB_ID", job, 0, INT32_MAX, &id));
    d.master_port = DistEnv::kDefaultPortBase + DistEnv::kPortsPerJob * (id % DistEnv::kDefaultPortSlots);
  }
  *out = std::move(d);
  return Status::OK();
}

Status DistEnv::from_env(DistEnv* out) {
  return from_env(out, [](const char* v) { return std::getenv(v); });
}

}  // namespace hydro
