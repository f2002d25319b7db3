// hydro._C's copies of Python's tensors into hydro's host slots (issue 58): a save's, and a
// resume's back to the device. The tensors are named by their `_cdata` (the TensorImpl's address,
// which Python holds a reference to for the call): this module does not link libtorch_python,
// whose caster would take the objects.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "bindings.h"
#include "hydro/runtime.h"

namespace py = pybind11;

namespace hydro {
namespace {

// A reference to the tensor whose TensorImpl is at `cdata` (a Python tensor's `_cdata`).
torch::Tensor tensor_at(uintptr_t cdata) {
  using Impl = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  return torch::Tensor(Impl::reclaim_copy(reinterpret_cast<c10::TensorImpl*>(cdata)));
}

// Host memory for a device tensor's copy, as bytes torch.frombuffer views.
struct HostBuffer {
  torch::Tensor memory;
};

py::object host_buffer(const torch::Tensor& memory) {
  return memory.defined() ? py::cast(HostBuffer{memory}) : py::none();
}

}  // namespace

void bind_tensor_copies(py::module_& m) {
  py::class_<HostBuffer>(m, "HostBuffer", py::buffer_protocol()).def_buffer([](HostBuffer& b) {
    return py::buffer_info(b.memory.data_ptr(), 1, py::format_descriptor<uint8_t>::format(),
                           static_cast<py::ssize_t>(b.memory.nbytes()));
  });
  m.def(
      "checkpoint_buffer", [](uintptr_t src) { return host_buffer(checkpoint_buffer(tensor_at(src))); },
      py::arg("src_cdata"));
  m.def(
      "copy_for_checkpoint", [](uintptr_t dst, uintptr_t src) { copy_for_checkpoint(tensor_at(dst), tensor_at(src)); },
      py::arg("dst_cdata"), py::arg("src_cdata"), py::call_guard<py::gil_scoped_release>());
  m.def("restores_through_pool", &restores_through_pool);
  m.def(
      "restore_buffer", [](uintptr_t dst) { return host_buffer(restore_buffer(tensor_at(dst))); },
      py::arg("dst_cdata"));
  m.def(
      "restore_through",
      [](uintptr_t slot, uintptr_t dst, uintptr_t src) {
        return restore_through(tensor_at(slot), tensor_at(dst), tensor_at(src));
      },
      py::arg("slot_cdata"), py::arg("dst_cdata"), py::arg("src_cdata"), py::call_guard<py::gil_scoped_release>());
  m.def("wait_restores", &wait_restores, py::call_guard<py::gil_scoped_release>());
}

}  // namespace hydro
