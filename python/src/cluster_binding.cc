#include "cluster_binding.h"

#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>

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
      .def_property_readonly("workers", &Cluster::workers,
                             "The ranks of the workers that are members now (an elastic job's "
                             "fall as workers leave; docs/elastic.md).")
      .def_property_readonly("epoch", &Cluster::epoch,
                             "How many times the membership changed (0 until a worker leaves "
                             "an elastic job).")
      .def_property_readonly("joined_running_job", &Cluster::joined_running_job,
                             "Whether this worker was admitted into a running elastic job in a "
                             "departed worker's place (docs/elastic.md, \"Workers that join\").")
      .def(
          "record_span",
          [](Cluster& c, const std::string& track, const std::string& name, int64_t start_ns,
             int64_t end_ns) {
            using std::chrono::nanoseconds;
            using std::chrono::steady_clock;
            c.RecordSpan(track, name, steady_clock::time_point(nanoseconds(start_ns)),
                         steady_clock::time_point(nanoseconds(end_ns)));
          },
          py::arg("track"), py::arg("name"), py::arg("start_ns"), py::arg("end_ns"),
          "Adds a span to this process's timeline (TANDEM_TIMELINE), times from "
          "time.monotonic_ns(); nothing without a timeline.")
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
