#include "held_tensor.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <string_view>

#include "base/dtype.h"
#include "tandem/error.h"

namespace py = pybind11;

namespace tandem::python {
namespace {

constexpr const char* kSupported =
    "tandem takes float32, float64, float16, bfloat16, int32, int64 and uint8";

// torch's dtype as str(tensor.dtype) spells it.
bool TorchDType(std::string_view name, DType* out) {
  static constexpr std::pair<std::string_view, DType> kTable[] = {
      {"torch.float32", DType::kF32}, {"torch.float64", DType::kF64},
      {"torch.float16", DType::kF16}, {"torch.bfloat16", DType::kBF16},
      {"torch.int32", DType::kI32},   {"torch.int64", DType::kI64},
      {"torch.uint8", DType::kU8}};
  for (const auto& [n, d] : kTable) {
    if (n == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

// A struct-module format ("f", "<d", "=e", "l", ...) of `itemsize` bytes.
bool BufferDType(std::string_view format, py::ssize_t itemsize, DType* out) {
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) {
    format.remove_prefix(1);
  }
  if (format.size() != 1) return false;
  switch (format[0]) {
    case 'f':
      *out = DType::kF32;
      return itemsize == 4;
    case 'd':
      *out = DType::kF64;
      return itemsize == 8;
    case 'e':
      *out = DType::kF16;
      return itemsize == 2;
    case 'B':
      *out = DType::kU8;
      return itemsize == 1;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) {
        *out = DType::kI32;
        return true;
      }
      if (itemsize == 8) {
        *out = DType::kI64;
        return true;
      }
      return false;
    default:
      return false;
  }
}

bool IsTorchTensor(py::handle obj) {
  // torch.Tensor and its subclasses (nn.Parameter) without importing torch.
  for (py::handle cls : py::reinterpret_borrow<py::tuple>(obj.get_type().attr("__mro__"))) {
    if (py::str(cls.attr("__module__")).cast<std::string>() == "torch" &&
        py::str(cls.attr("__name__")).cast<std::string>() == "Tensor") {
      return true;
    }
  }
  return false;
}

std::string TypeName(py::handle obj) {
  return py::str(obj.get_type().attr("__module__")).cast<std::string>() + "." +
         py::str(obj.get_type().attr("__qualname__")).cast<std::string>();
}

}  // namespace

HeldTensor HeldTensor::FromPython(py::handle obj, const std::string& what, bool writable) {
  HeldTensor held;
  held.object_ = py::reinterpret_borrow<py::object>(obj);
  if (IsTorchTensor(obj)) {
    const std::string device = py::str(obj.attr("device")).cast<std::string>();
    if (device != "cpu") {
      throw InvalidArgument(what + ": a torch tensor on device " + device +
                            "; tandem takes CPU tensors (move it with .cpu())");
    }
    const std::string layout = py::str(obj.attr("layout")).cast<std::string>();
    if (layout != "torch.strided") {
      throw InvalidArgument(what + ": a torch tensor of layout " + layout +
                            "; tandem takes dense (torch.strided) tensors");
    }
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      throw InvalidArgument(what +
                            ": the torch tensor is not contiguous; pass .contiguous() (a copy) "
                            "and copy results back");
    }
    const std::string dtype = py::str(obj.attr("dtype")).cast<std::string>();
    if (!TorchDType(dtype, &held.view_.dtype)) {
      throw InvalidArgument(what + ": unsupported dtype " + dtype + "; " + kSupported);
    }
    for (py::handle d : obj.attr("shape")) held.view_.shape.push_back(d.cast<int64_t>());
    held.view_.data = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());
    return held;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw InvalidArgument(what + ": a " + TypeName(obj) +
                          " is neither a torch tensor nor a buffer (NumPy array); " + kSupported);
  }
  // Strides and format are asked for so that a non-contiguous array is
  // reported here, by name, rather than refused by the exporter.
  auto* raw = new Py_buffer;
  const int flags = PyBUF_RECORDS_RO;
  if (PyObject_GetBuffer(obj.ptr(), raw, flags) != 0) {
    delete raw;
    PyErr_Clear();
    throw InvalidArgument(what + ": a " + TypeName(obj) + " refused to export its buffer");
  }
  const bool contiguous = PyBuffer_IsContiguous(raw, 'C') != 0;
  const bool readonly = raw->readonly != 0;
  held.buffer_ = std::make_unique<py::buffer_info>(raw, /*ownview=*/true);
  const py::buffer_info& info = *held.buffer_;
  if (!contiguous) {
    throw InvalidArgument(what +
                          ": the array is not C-contiguous; pass "
                          "numpy.ascontiguousarray(x) (a copy) and copy results back");
  }
  if (writable && readonly) {
    throw InvalidArgument(what + ": the array is read-only and this argument is written to");
  }
  if (!BufferDType(info.format, info.itemsize, &held.view_.dtype)) {
    throw InvalidArgument(what + ": unsupported dtype (buffer format '" + info.format + "', " +
                          std::to_string(info.itemsize) + " bytes per element); " + kSupported);
  }
  for (py::ssize_t d : info.shape) held.view_.shape.push_back(static_cast<int64_t>(d));
  held.view_.data = info.ptr;
  return held;
}

std::vector<HeldTensor> HoldTensors(py::handle objs, const std::string& what, bool writable) {
  std::vector<HeldTensor> held;
  if (py::isinstance<py::list>(objs) || py::isinstance<py::tuple>(objs)) {
    size_t i = 0;
    for (py::handle o : objs) {
      held.push_back(HeldTensor::FromPython(o, what + "[" + std::to_string(i++) + "]", writable));
    }
    if (held.empty()) throw InvalidArgument(what + ": an empty list of tensors");
  } else {
    held.push_back(HeldTensor::FromPython(objs, what, writable));
  }
  return held;
}

std::vector<TensorView> Views(const std::vector<HeldTensor>& held) {
  std::vector<TensorView> views;
  views.reserve(held.size());
  for (const auto& h : held) views.push_back(h.view());
  return views;
}

}  // namespace tandem::python
