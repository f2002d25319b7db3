// The job's ranks joined in a c10d Gloo process group (libtorch 1.13 and 2.x), rendezvous
// through a TCPStore at MASTER_ADDR:MASTER_PORT served by rank 0 (see hydro/dist_env.h for where
// rank and world size come from: torchrun's variables or Slurm's).
//
//   auto group = hydro::join_gloo_group(std::chrono::minutes(30));
//   hydro::broadcast_parameters(*group, *model);      // every rank starts from rank 0's weights
//   ... loss.backward(); hydro::average_gradients(*group, *model); optimizer.step(); ...
//   hydro::MetricsTracker all = hydro::all_reduce_metrics(*group, metrics);  // the epoch, all ranks
//
// Pausing many ranks: a suspend (SIGTSTP to every task) pauses each rank at its next operator. A
// rank that is inside a collective waiting for a paused peer cannot stop at an operator; it waits
// there, and that wait counts against `timeout`. So the documented limit: a pause or a
// `scontrol suspend` must be shorter than the process group's timeout, or the waiting rank fails
// with Gloo's timeout error on resume. Choose the timeout above the longest suspend you expect.
#pragma once

#include <torch/torch.h>  // TORCH_VERSION_MAJOR

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

#include "hydro/dist_env.h"
#include "hydro/metrics.h"

namespace hydro {

// What runs the collectives: libtorch 2 made ProcessGroupGloo a c10d::Backend; in 1.x it is a
// c10d::ProcessGroup. Both have broadcast, allreduce and allgather.
#if TORCH_VERSION_MAJOR >= 2
using Collectives = c10d::Backend;
#else
using Collectives = c10d::ProcessGroup;
#endif

struct Group {
  DistEnv env;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Collectives> pg;
  // The timeout asked for. With HYDRO_PAUSE on, the collectives get kHoldProof instead, which no
  // hold reaches: pass this one to Runtime::watch_collectives, which watches it in running time.
  std::chrono::milliseconds timeout{0};
  int rank() const { return env.rank; }
  int size() const { return env.world_size; }
};

// Joins every rank of the job (DistEnv::from_env). `timeout` bounds the rendezvous and, unless
// HYDRO_PAUSE is on (see Group::timeout), every collective. Throws std::runtime_error naming the
// variable or the address on failure. The collectives are c10d's Gloo where this libtorch ships
// the gloo headers it was built with (Debian's libtorch-dev, with libgloo-dev), and otherwise
// store_collectives over the same TCPStore (PyPI's wheels); hydro's log line names which.
std::shared_ptr<Group> join_gloo_group(std::chrono::milliseconds timeout);

// Collectives over `store` alone, for `rank` of `size` ranks that share it: what join_gloo_group
// gives where the libtorch ships no gloo headers (PyPI's wheels), and usable by any ranks that
// share a store. broadcast, allreduce (ReduceOp::SUM) and allgather: each rank publishes its
// tensors under a key of its own and reads every rank's; a sum adds them in rank order, so every
// rank holds the same bits. Each call is done when it returns (its Work is complete), and throws
// where a rank waits longer than the store's timeout. Every byte goes through the store: for the
// small models and metrics of a CPU job, not for a large model's gradients.
c10::intrusive_ptr<Collectives> store_collectives(c10::intrusive_ptr<c10d::Store> store, int rank, int size);

// Replaces every rank's parameters and buffers with rank 0's.
void broadcast_parameters(Group& group, torch::nn::Module& module);

// Averages the gradients of `module` over the ranks (what DDP does after backward), in one
// allreduce of a flat buffer. Every rank ends with the same, bit-for-bit, gradients.
void average_gradients(Group& group, torch::nn::Module& module);

// Every rank's metrics combined (MetricsTracker::merge, in rank order, so every rank gets the
// same bits): one allgather of each rank's serialized tracker. Every rank must hold the same
// names; otherwise every rank throws std::runtime_error naming a name and the ranks that differ.
MetricsTracker all_reduce_metrics(Group& group, const MetricsTracker& local);

}  // namespace hydro
