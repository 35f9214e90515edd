#include "cluster_binding.h"

#include <memory>

#include "tandem/cluster.h"

namespace py = pybind11;

namespace tandem::python {

void RegisterCluster(py::module_& m) {
  py::class_<Cluster>(m, "Cluster",
                      "This process's node in the job: joined once, then the collectives and a "
                      "distributed store open on it with one worker rank.")
      .def(py::init([] {
        py::gil_scoped_release release;
        return Cluster::Join();
      }))
      .def_property_readonly("role",
                             [](const Cluster& c) { return std::string(RoleName(c.role())); })
      .def_property_readonly("rank", &Cluster::rank)
      .def_property_readonly("num_workers", &Cluster::num_workers)
      .def_property_readonly("num_servers", &Cluster::num_servers)
      .def(
          "finalize",
          [](Cluster& c) {
            py::gil_scoped_release release;
            c.Finalize();
          },
          "Gives up this handle's hold on the node; the last user of the node leaves the job "
          "with the final barrier (GIL released). Raises what the barrier raises.");
}

}  // namespace tandem::python
