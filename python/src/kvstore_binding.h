// tandem._core.KVStore and KVHandle: include/tandem/kvstore.h for Python.
// The MXNet-style wrapper (key lists, optional outputs) is
// python/tandem/kvstore.py; this layer takes one key per call.
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

/// Adds KVStore and KVHandle to `m`. Call once at module initialisation.
void RegisterKVStore(pybind11::module_& m);

}  // namespace tandem::python
