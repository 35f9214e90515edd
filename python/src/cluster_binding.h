// tandem._core.Cluster: this process's membership in the job
// (tandem::Cluster, include/tandem/cluster.h), joined once and shared by the
// collectives and a distributed store opened on it (tandem/_node.py).
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

/// Adds the Cluster class to `m`. Call once at module initialisation,
/// before RegisterKVStore and RegisterCollectives (their constructors take
/// one).
void RegisterCluster(pybind11::module_& m);

}  // namespace tandem::python
