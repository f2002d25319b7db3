// hydro._C's data parts: the sampler's order and position, the sharded file list, and the
// launcher's watchdog client.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <signal.h>

#include <string>

#include "bindings.h"
#include "hydro/sampler.h"
#include "hydro/sampler_order.h"
#include "hydro/sharded_dataset.h"
#include "hydro/watchdog_client.h"

namespace py = pybind11;

namespace hydro {
namespace {

py::dict position_dict(const SamplerPosition& p) {
  py::dict d;
  d["epoch"] = p.epoch;
  d["consumed"] = p.consumed;
  d["seed"] = p.seed;
  d["size"] = p.size;
  d["num_replicas"] = p.num_replicas;
  d["shuffle"] = p.shuffle;
  d["drop_last"] = p.drop_last;
  return d;
}

SamplerPosition position_of(const py::dict& d) {
  auto get = [&](const char* key) {
    if (!d.contains(key))
      throw py::key_error(std::string("hydro: sampler state has no '") + key + "': was it saved by another sampler?");
    return d[key];
  };
  return {get("epoch").cast<int64_t>(), get("consumed").cast<int64_t>(),     get("seed").cast<uint64_t>(),
          get("size").cast<int64_t>(),  get("num_replicas").cast<int64_t>(), get("shuffle").cast<bool>(),
          get("drop_last").cast<bool>()};
}

void bind_sampler(py::module_& m) {
  using S = InterruptibleDistributedSampler;
  py::class_<S>(m, "SamplerOrder")
      .def(py::init<size_t, int64_t, int64_t, uint64_t, bool, bool>(), py::arg("size"), py::arg("num_replicas"),
           py::arg("rank"), py::arg("seed"), py::arg("shuffle"), py::arg("drop_last"))
      .def("reset", [](S& s) { s.reset(); })
      .def(
          "next",
          [](S& s, size_t n) -> py::object {
            auto batch = s.next(n);
            if (!batch) return py::none();
            return py::cast(*batch);
          },
          py::arg("n"))
      .def("advance", &S::advance, py::arg("n"))
      .def("set_epoch", &S::set_epoch, py::arg("epoch"))
      .def("next_epoch", &S::next_epoch)
      .def("set_auto_advance", &S::set_auto_advance, py::arg("on"))
      .def_property_readonly("epoch", &S::epoch)
      .def_property_readonly("consumed", &S::consumed)
      .def_property_readonly("remaining", &S::remaining)
      .def("epoch_indices", &S::epoch_indices)
      .def("position", [](const S& s) { return position_dict(s.position()); })
      .def(
          "restore", [](S& s, const py::dict& d) { s.restore(position_of(d)); }, py::arg("state"));
  m.def("sampler_num_samples", &sampler_num_samples, py::arg("n"), py::arg("world"), py::arg("drop_last"));
}

void bind_watchdog(py::module_& m) {
  py::class_<WatchdogClient>(m, "WatchdogClient")
      .def(py::init<>())
      .def(py::init<std::string, int>(), py::arg("fifo"), py::arg("signal") = SIGKILL)
      .def_property_readonly("enabled", &WatchdogClient::enabled)
      .def_property_readonly("path", &WatchdogClient::path)
      .def(
          "arm", [](WatchdogClient& c, const std::string& scope, double s) { check(c.arm(scope, s)); },
          py::arg("scope"), py::arg("seconds"))
      .def(
          "disarm", [](WatchdogClient& c, const std::string& scope) { check(c.disarm(scope)); }, py::arg("scope"));
  m.def(
      "sharded_files",
      [](const std::string& folder, int64_t world, int64_t rank, double pct) {
        return ShardedFileDataset(folder, ShardSpec{world, rank, pct}).files();
      },
      py::arg("folder"), py::arg("world"), py::arg("rank"), py::arg("samples_pct_per_replica"));
}

}  // namespace

void bind_data(py::module_& m) {
  bind_sampler(m);
  bind_watchdog(m);
}

}  // namespace hydro
