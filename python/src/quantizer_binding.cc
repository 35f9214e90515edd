#include "quantizer_binding.h"

#include <pybind11/stl.h>

#include <map>
#include <string>

#include "held_tensor.h"
#include "tandem/gradient_quantizer.h"

namespace py = pybind11;

namespace tandem::python {

namespace {

// in (uint8) into out (float32) through one of the quantizer's expansions,
// without the GIL.
template <void (GradientQuantizer::*Expand)(const TensorView&, const TensorView&) const>
void ExpandInto(const GradientQuantizer& q, py::handle in, py::handle out) {
  HeldTensor i = HeldTensor::FromPython(in, "in", false);
  HeldTensor o = HeldTensor::FromPython(out, "out", true);
  py::gil_scoped_release release;
  (q.*Expand)(i.view(), o.view());
}

}  // namespace

void RegisterQuantizer(py::module_& m) {
  py::class_<GradientQuantizer>(m, "GradientQuantizer",
                                "MXNet's 2bit/1bit gradient quantisation with a residual "
                                "(docs/gradient-compression.md)")
      .def(py::init<const std::map<std::string, std::string>&>(), py::arg("params"),
           "params: {'type': '2bit'|'1bit', 'threshold': '0.5'} (MXNet's form). Raises "
           "InvalidArgument naming the bad entry.")
      .def_property_readonly("type", &GradientQuantizer::type)
      .def_property_readonly("threshold", &GradientQuantizer::threshold)
      .def("quantized_bytes", &GradientQuantizer::QuantizedBytes, py::arg("count"),
           "Bytes of the quantised form of `count` values (whole 32-bit words).")
      .def(
          "quantize",
          [](const GradientQuantizer& q, py::handle grad, py::handle residual, py::handle out) {
            HeldTensor g = HeldTensor::FromPython(grad, "grad", false);
            HeldTensor r = HeldTensor::FromPython(residual, "residual", true);
            HeldTensor o = HeldTensor::FromPython(out, "out", true);
            py::gil_scoped_release release;
            q.Quantize(g.view(), r.view(), o.view());
          },
          py::arg("grad"), py::arg("residual"), py::arg("out"),
          "Quantises grad + residual (float32) into out (uint8, quantized_bytes(n)); residual "
          "keeps what was not sent. Raises InvalidArgument naming a wrong dtype or size.")
      .def("dequantize", &ExpandInto<&GradientQuantizer::Dequantize>, py::arg("in"), py::arg("out"),
           "Expands in (uint8) into out (float32): the values MXNet's server sums.")
      .def("dequantize_add", &ExpandInto<&GradientQuantizer::DequantizeAdd>, py::arg("in"),
           py::arg("out"), "As dequantize, adding the values to out.");
}

}  // namespace tandem::python
