#include "placement_binding.h"

#include <optional>

#include "tandem/cluster.h"

namespace py = pybind11;

namespace tandem::python {

void RegisterPlacement(py::module_& m) {
  m.def(
      "local_placement",
      []() -> py::object {
        std::optional<LocalPlacement> p = ReadLocalPlacement();
        if (!p) return py::none();
        return py::make_tuple(p->contract, p->local_rank, p->local_size);
      },
      "(contract, local rank, local size) from the first start-up contract that the "
      "environment describes (tandem, Open MPI, PMI, Slurm, torchrun, TrainJob, Indexed "
      "Job, Volcano; not DMLC, not PMIx), or None. Joins nothing. Raises ConfigError "
      "naming a variable that is present but unusable.");
}

}  // namespace tandem::python
