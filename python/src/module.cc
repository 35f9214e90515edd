// tandem._core: the extension module under the `tandem` Python package
// (python/tandem/). It binds the public C++ API (include/tandem/) and
// nothing else; the Pythonic layer is in the package. docs/python.md.
#include <pybind11/pybind11.h>

#include "cluster_binding.h"
#include "collective_binding.h"
#include "error_mapping.h"
#include "kvstore_binding.h"
#include "placement_binding.h"
#include "quantizer_binding.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "tandem's C++ API (KVStore, collectives) for the tandem package";
  m.attr("__version__") = TANDEM_VERSION;  // the C++ runtime's, as `tandem version` prints
  tandem::python::RegisterErrors(m);
  tandem::python::RegisterCluster(m);
  tandem::python::RegisterKVStore(m);
  tandem::python::RegisterCollectives(m);
  tandem::python::RegisterPlacement(m);
  tandem::python::RegisterQuantizer(m);
}
