// A Python tensor argument seen as a tandem::TensorView without copying:
// NumPy arrays (and anything else with the buffer protocol) through the
// buffer protocol, torch tensors through data_ptr(). docs/python.md states
// the rules (CPU, contiguous, supported dtypes, writable outputs).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::python {

/// A view of a Python object's memory plus what keeps that memory alive
/// and exported: a reference to the object and, for buffer-protocol
/// objects, the held Py_buffer (a NumPy array cannot be resized while it is
/// exported).
///
/// Thread-safety: create and destroy with the GIL held; `view` may be read
/// without the GIL while the HeldTensor lives.
class HeldTensor {
 public:
  /// Views `obj` as a tensor. `what` names the argument in error messages
  /// ("value", "out[1]"); `writable` requires memory tandem may write (an
  /// output). Requires the GIL. Throws tandem::InvalidArgument naming the
  /// argument for an object that is neither a buffer nor a torch tensor, a
  /// non-CPU or non-contiguous tensor, an unsupported dtype, or a read-only
  /// buffer where `writable`.
  static HeldTensor FromPython(pybind11::handle obj, const std::string& what, bool writable);

  HeldTensor(HeldTensor&&) noexcept = default;
  HeldTensor& operator=(HeldTensor&&) noexcept = default;
  ~HeldTensor() = default;

  const TensorView& view() const { return view_; }
  /// The Python object (to hand back to the caller).
  const pybind11::object& object() const { return object_; }

 private:
  HeldTensor() = default;
  TensorView view_;
  pybind11::object object_;
  std::unique_ptr<pybind11::buffer_info> buffer_;
};

/// Views every object of `objs` (a tensor or a list/tuple of tensors).
/// `what` prefixes each name ("values" gives "values[0]", ...). Requires the
/// GIL. Throws as HeldTensor::FromPython, and InvalidArgument for an empty
/// list.
std::vector<HeldTensor> HoldTensors(pybind11::handle objs, const std::string& what, bool writable);

/// The views of `held`, in order.
std::vector<TensorView> Views(const std::vector<HeldTensor>& held);

}  // namespace tandem::python
