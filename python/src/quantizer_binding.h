// tandem._core.GradientQuantizer: MXNet's 2-bit/1-bit quantisation
// (include/tandem/gradient_quantizer.h) for tandem.torch's allreduce path.
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

/// Adds GradientQuantizer to the module.
void RegisterQuantizer(pybind11::module_& m);

}  // namespace tandem::python
