// tandem._core.local_placement: where this process stands on its host, read
// from the start-up contract the C++ runtime reads (tandem::ReadLocalPlacement,
// include/tandem/cluster.h), for tandem.local_rank() and tandem.local_size().
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

/// Adds local_placement() to `m`. Call once at module initialisation.
void RegisterPlacement(pybind11::module_& m);

}  // namespace tandem::python
