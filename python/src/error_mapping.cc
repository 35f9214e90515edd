#include "error_mapping.h"

#include <exception>

#include "tandem/error.h"

namespace py = pybind11;

namespace tandem::python {
namespace {

// The classes live in the module (attributes); the translator finds them
// there, so nothing outlives the module in a C++ static.
PyObject* NewClass(py::module_& m, const char* name, py::handle bases, const char* doc) {
  const std::string full = py::str(m.attr("__name__")).cast<std::string>() + "." + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_steal<py::object>(cls));
  return cls;
}

void Raise(const char* name, const std::exception& e) {
  py::object cls = py::module_::import("tandem._core").attr(name);
  PyErr_SetString(cls.ptr(), e.what());
}

}  // namespace

void RegisterErrors(py::module_& m) {
  PyObject* base = NewClass(m, "Error", PyExc_RuntimeError,
                            "Base of every exception tandem raises (tandem::Error).");
  PyObject* invalid =
      NewClass(m, "InvalidArgument", py::make_tuple(py::handle(base), py::handle(PyExc_ValueError)),
               "A value that cannot be used (bad shape, dtype, unknown key); nothing changed.");
  NewClass(m, "CallMismatch", py::handle(invalid),
           "The ranks made different collective calls at the same point; the message lists "
           "each rank's call.");
  const py::handle b(base);
  NewClass(m, "ConfigError", b, "The environment or a configuration value is unusable.");
  NewClass(m, "Timeout", b, "A wait ran out of time; the message says for what and whom.");
  PyObject* lost =
      NewClass(m, "PeerLost", b, "A node of the job died or became unreachable; it is named.");
  NewClass(m, "MembershipChanged", py::handle(lost),
           "A worker left an elastic job: the collective operation was abandoned; "
           "tandem.regroup() makes the world again over the workers that remain.");
  NewClass(m, "AuthFailed", b, "A peer failed the authentication handshake.");
  NewClass(m, "ProtocolError", b, "A peer broke the wire protocol.");
  NewClass(m, "IoError", b, "An operating-system call failed.");
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const CallMismatch& e) {
      Raise("CallMismatch", e);
    } catch (const InvalidArgument& e) {
      Raise("InvalidArgument", e);
    } catch (const ConfigError& e) {
      Raise("ConfigError", e);
    } catch (const Timeout& e) {
      Raise("Timeout", e);
    } catch (const MembershipChanged& e) {
      Raise("MembershipChanged", e);
    } catch (const PeerLost& e) {
      Raise("PeerLost", e);
    } catch (const AuthFailed& e) {
      Raise("AuthFailed", e);
    } catch (const ProtocolError& e) {
      Raise("ProtocolError", e);
    } catch (const IoError& e) {
      Raise("IoError", e);
    } catch (const Error& e) {
      Raise("Error", e);
    }
  });
}

}  // namespace tandem::python
