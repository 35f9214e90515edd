// tandem._core.Collectives, Communicator and CollectiveHandle:
// include/tandem/collective.h for Python. The Horovod-style functions
// (tandem.allreduce, ...; output allocation, shapes) are
// python/tandem/collective.py.
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

/// Adds Collectives, Communicator and CollectiveHandle to `m`. Call once at
/// module initialisation.
void RegisterCollectives(pybind11::module_& m);

}  // namespace tandem::python
