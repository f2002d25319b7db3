// The parts of hydro._C that live in files of their own.
#pragma once

#include <pybind11/pybind11.h>

namespace hydro {

// hydro._C.Job, JobContext, JobRunner, MetricsTracker (job.cpp).
void bind_job(pybind11::module_& m);

}  // namespace hydro
