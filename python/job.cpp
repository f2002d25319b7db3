// The C++ JobRunner for Python: the same runner, its callbacks Python callables (pybind11 takes the
// GIL to call them), and run() and step_end() without the GIL.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <type_traits>

#include "bindings.h"
#include "hydro/job.h"
#include "hydro/runtime.h"

namespace py = pybind11;

namespace hydro {
namespace {

py::dict stats_dict(const MetricsSummary& summary) {
  py::dict d;
  for (const auto& [name, s] : summary)
    d[py::str(name)] = py::dict(py::arg("sum") = s.sum, py::arg("count") = s.count, py::arg("min") = s.min,
                                py::arg("max") = s.max, py::arg("mean") = s.mean());
  return d;
}

py::list history_list(const std::vector<EpochMetrics>& history) {
  py::list out;
  for (const auto& e : history)
    out.append(
        py::dict(py::arg("epoch") = e.epoch, py::arg("step") = e.step, py::arg("metrics") = stats_dict(e.metrics)));
  return out;
}

// Several ranks: `gather` takes this rank's epoch metrics (their text form) and returns every
// rank's, in rank order (torch.distributed.all_gather_object in hydro/job.py); they merge here.
std::function<MetricsTracker(const MetricsTracker&)> reducer(py::function gather) {
  return [gather](const MetricsTracker& mine) {
    py::gil_scoped_acquire gil;
    MetricsTracker all;
    bool first = true;
    int rank = 0;
    for (auto text : gather(mine.serialize())) {
      MetricsTracker t;
      Status st = MetricsTracker::parse(text.cast<std::string>(), "rank " + std::to_string(rank++), &t);
      if (st.ok()) st = first ? Status::OK() : all.merge(t);
      if (!st.ok()) throw std::runtime_error("hydro: reducing the epoch's metrics: " + st.message());
      if (first) all = t, first = false;
    }
    return all;
  };
}

// The runner's own context, by reference (pybind11 would copy an lvalue reference for the call,
// and step_end() on the copy would not move the runner's step).
py::object ref(const JobContext& ctx) { return py::cast(&ctx, py::return_value_policy::reference); }

py::object context_arg(int64_t epoch) { return py::int_(epoch); }
py::object context_arg(JobContext& ctx) { return ref(ctx); }
py::object context_arg(const JobContext& ctx) { return ref(ctx); }

template <typename R, typename... Args>
std::function<R(Args...)> callback(py::function fn) {
  return [fn](Args... args) -> R {
    py::gil_scoped_acquire gil;
    py::object r = fn(context_arg(args)...);
    if constexpr (!std::is_void_v<R>) return r.cast<R>();
  };
}

}  // namespace

void bind_job(py::module_& m) {
  py::class_<MetricsTracker>(m, "MetricsTracker")
      .def("add", &MetricsTracker::add, py::arg("name"), py::arg("value"))
      .def("mean", &MetricsTracker::mean, py::arg("name"))
      .def("names", &MetricsTracker::names)
      .def("summary", [](const MetricsTracker& t) { return stats_dict(t.epoch_summary()); });
  py::class_<JobContext>(m, "JobContext")
      .def_property_readonly("epoch", &JobContext::epoch)
      .def_property_readonly("step", &JobContext::step)
      .def_property_readonly("epoch_step", &JobContext::epoch_step)
      .def_property_readonly("metrics", py::overload_cast<>(&JobContext::metrics),
                             py::return_value_policy::reference_internal)
      .def_property_readonly("history", [](const JobContext& c) { return history_list(c.history()); })
      .def_property_readonly("preempted", &JobContext::preempted)
      .def("step_end", &JobContext::step_end, py::arg("epoch_step"), py::call_guard<py::gil_scoped_release>());
  py::class_<Job>(m, "Job")
      .def(py::init<>())
      .def_property(
          "init", [](const Job& j) { return static_cast<bool>(j.init); },
          [](Job& j, py::function f) { j.init = callback<void, JobContext&>(f); })
      .def_property(
          "epoch", [](const Job& j) { return static_cast<bool>(j.epoch); },
          [](Job& j, py::function f) { j.epoch = callback<void, int64_t, JobContext&>(f); })
      .def_property(
          "exit", [](const Job& j) { return static_cast<bool>(j.exit); },
          [](Job& j, py::function f) { j.exit = callback<void, JobContext&>(f); })
      .def_readwrite("steps_per_epoch", &Job::steps_per_epoch)
      .def("epoch_limiter", &Job::epoch_limiter, py::arg("epochs"), py::return_value_policy::reference_internal)
      .def(
          "stop_when", [](Job& j, py::function f) -> Job& { return j.stop_when(callback<bool, const JobContext&>(f)); },
          py::arg("predicate"), py::return_value_policy::reference_internal);
  py::class_<JobRunner>(m, "JobRunner")
      // The Runtime keeps its runner alive: it saves the runner's record (hydro_job.pt) by reference.
      .def(py::init<Runtime&>(), py::arg("runtime"), py::keep_alive<2, 1>())
      .def(
          "reduce_metrics_with", [](JobRunner& r, py::function gather) { r.reduce_metrics_with(reducer(gather)); },
          py::arg("gather"))
      .def("run", &JobRunner::run, py::arg("job"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("history", [](const JobRunner& r) { return history_list(r.history()); });
}

}  // namespace hydro
