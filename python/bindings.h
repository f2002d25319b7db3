// The parts of hydro._C that live in files of their own.
#pragma once

#include <pybind11/pybind11.h>

#include "hydro/status.h"

namespace hydro {

// The deleter of a bound object whose destruction may block: a Runtime joins its background threads
// and may wait for peer ranks; a staged checkpoint or shard closes files, joins a write-behind
// thread or removes a staging directory. Never with the GIL.
struct ReleaseGilDelete {
  template <typename T>
  void operator()(T* p) const {
    pybind11::gil_scoped_release nogil;
    delete p;
  }
};

// A failed Status as Python's OSError (the message names the file); throws.
[[noreturn]] void raise_os_error(const Status& s);
// Nothing for an ok Status; else ValueError for bad input, OSError for the rest.
void check(const Status& s);

// hydro._C.SamplerOrder, sampler_num_samples, WatchdogClient, sharded_files (data.cpp).
void bind_data(pybind11::module_& m);

// hydro._C.StagedCheckpoint, ShardFiles, resume_order, verify_share (checkpoint_dir.cpp).
void bind_checkpoint_dir(pybind11::module_& m);

// hydro._C.HostBuffer, checkpoint_buffer, copy_for_checkpoint and the resume's restore_* (the
// copies of Python's tensors into hydro's host slots and back: tensor_copies.cpp).
void bind_tensor_copies(pybind11::module_& m);

// hydro._C.Job, JobContext, JobRunner, MetricsTracker (job.cpp).
void bind_job(pybind11::module_& m);

}  // namespace hydro
