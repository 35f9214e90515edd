// tandem's C++ exceptions (include/tandem/error.h) as Python exception
// classes of the extension module, with the C++ message unchanged:
//
//   tandem.Error(RuntimeError)
//     InvalidArgument(Error, ValueError), ConfigError, Timeout, PeerLost,
//     AuthFailed, ProtocolError, IoError
#pragma once

#include <pybind11/pybind11.h>

namespace tandem::python {

/// Creates the classes in `m` and registers the translator that raises
/// them. Call once, from the module's initialisation (GIL held).
void RegisterErrors(pybind11::module_& m);

}  // namespace tandem::python
