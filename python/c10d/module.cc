// tandem._c10d: the "tandem" backend of torch.distributed
// (process_group_tandem.h), built against Debian's LibTorch 1.13 when
// CMake finds it. python/tandem/_c10d_backend.py registers it with
// torch.distributed; docs/pytorch-backend.md.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group_tandem.h"

namespace py = pybind11;
using tandem::c10d_backend::ProcessGroupTandem;

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "tandem's torch.distributed backend (a c10d::ProcessGroup over tandem's collectives)";
  // The base class's binding, and tandem's exception classes (their
  // translator is pybind11's, shared with this module).
  py::module_::import("torch.distributed");
  py::module_::import("tandem._core");
  py::class_<ProcessGroupTandem, ::c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupTandem>>(
      m, "ProcessGroupTandem",
      "torch.distributed's process group over tandem's collectives; made by "
      "dist.init_process_group(\"tandem\") and dist.new_group(backend=\"tandem\")")
      .def("_shutdown", &ProcessGroupTandem::Shutdown,
           "Completes the queued operations and leaves; the last group of a tandem job runs "
           "its final barrier (raises its error). Later operations raise. Idempotent.");
  m.def(
      "create_world",
      [](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout, bool default_group) {
        return ProcessGroupTandem::CreateWorld(store, rank, size, timeout, default_group);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("default_group"), py::call_guard<py::gil_scoped_release>(),
      "Forms a tandem job of `size` ranks through the c10d `store` and returns its group.");
  m.def(
      "create_subgroup",
      [](const ProcessGroupTandem& parent, const std::vector<int>& global_ranks,
         std::chrono::milliseconds timeout) {
        return ProcessGroupTandem::CreateSubGroup(parent, global_ranks, timeout);
      },
      py::arg("parent"), py::arg("global_ranks"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "A group over the ranks `global_ranks` of `parent`'s tandem job, on its connections.");
}
