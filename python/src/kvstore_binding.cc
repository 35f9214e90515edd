#include "kvstore_binding.h"

#include <pybind11/stl.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "held_tensor.h"
#include "tandem/cluster.h"
#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace py = pybind11;

namespace tandem::python {
namespace {

KVKey ToKey(py::handle key) {
  if (py::isinstance<py::bool_>(key)) {
    throw InvalidArgument("key: a bool; keys are int or str");
  }
  if (py::isinstance<py::int_>(key)) {
    // Any Python int, however large (2**63 does not fit a long long).
    int overflow = 0;
    const long long k = PyLong_AsLongLongAndOverflow(key.ptr(), &overflow);
    if (overflow != 0 || k < 0 || k > std::numeric_limits<int>::max()) {
      throw InvalidArgument("key " + py::str(key).cast<std::string>() + " is outside 0.." +
                            std::to_string(std::numeric_limits<int>::max()));
    }
    return KVKey(static_cast<int>(k));
  }
  if (py::isinstance<py::str>(key)) return KVKey(key.cast<std::string>());
  throw InvalidArgument("key: a " + py::str(key.get_type().attr("__name__")).cast<std::string>() +
                        "; keys are int or str");
}

/// A pending store call and the tensors it reads or writes: they stay
/// referenced (and NumPy buffers exported) until the call is done.
///
/// Thread-safety: Python calls it with the GIL held; the waits release it.
class PyKVHandle {
 public:
  PyKVHandle(KVHandle handle, std::vector<HeldTensor> held)
      : handle_(std::move(handle)), held_(std::move(held)) {}
  PyKVHandle(PyKVHandle&&) = default;
  /// Dropping a handle whose call is still running waits for it first:
  /// the memory it uses must outlive it. Errors were the caller's to see.
  ~PyKVHandle() {
    if (!held_.empty() && !handle_.Done()) {
      py::gil_scoped_release release;
      try {
        handle_.Wait();
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): dropped unobserved
      }
    }
  }
  void Wait(std::optional<double> timeout_s) {
    {
      py::gil_scoped_release release;
      if (timeout_s) {
        handle_.Wait(std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000)));
      } else {
        handle_.Wait();
      }
    }
    held_.clear();
  }
  bool Done() const { return handle_.Done(); }

 private:
  KVHandle handle_;
  std::vector<HeldTensor> held_;
};

/// Owns the store so that it can be closed (leaving the job) explicitly,
/// without the GIL, before the interpreter shuts down.
///
/// Thread-safety: Python calls it with the GIL held.
class PyKVStore {
 public:
  explicit PyKVStore(std::unique_ptr<KVStore> store) : store_(std::move(store)) {}
  /// Python dropped a store it never closed: the store's destructor leaves
  /// the job and logs (cannot throw) what failed.
  ~PyKVStore() {
    if (!store_) return;
    py::gil_scoped_release release;
    store_.reset();
  }

  KVStore& store() {
    if (!store_) throw InvalidArgument("the KVStore was closed");
    return *store_;
  }
  /// Leaves the job (a distributed store meets the other workers in a
  /// barrier) and destroys the store; the barrier's error (PeerLost,
  /// Timeout) is thrown after that, so that a worker ending on a lost peer
  /// exits with its code (tandem/_exit.py). Idempotent.
  void Close() {
    if (!store_) return;
    std::unique_ptr<KVStore> store = std::move(store_);
    py::gil_scoped_release release;
    std::exception_ptr error;
    try {
      store->Leave();
    } catch (...) {
      error = std::current_exception();
    }
    store.reset();
    if (error) std::rethrow_exception(error);
  }
  bool closed() const { return !store_; }

 private:
  std::unique_ptr<KVStore> store_;
};

KVParams ToParams(const py::dict& d) {
  KVParams params;
  for (auto [k, v] : d) {
    std::string value;
    if (py::isinstance<py::bool_>(v)) {
      value = v.cast<bool>() ? "true" : "false";
    } else if (py::isinstance<py::float_>(v)) {
      value = py::repr(v).cast<std::string>();  // the shortest exact spelling
    } else {
      value = py::str(v).cast<std::string>();
    }
    params[py::str(k).cast<std::string>()] = value;
  }
  return params;
}

}  // namespace

void RegisterKVStore(py::module_& m) {
  py::class_<PyKVHandle>(m, "KVHandle",
                         "The completion of an asynchronous store call; keeps its tensors "
                         "alive until done.")
      .def("wait", &PyKVHandle::Wait, py::arg("timeout") = std::nullopt,
           "Blocks (GIL released) until the call completed, at most `timeout` seconds "
           "(default TANDEM_KV_TIMEOUT); raises the call's error.")
      .def("done", &PyKVHandle::Done, "True once the call completed; never blocks.");

  py::class_<PyKVStore>(m, "KVStore", "include/tandem/kvstore.h, one key per call.")
      .def(py::init([](const std::string& type, Cluster* cluster) {
             std::unique_ptr<KVStore> store;
             {
               py::gil_scoped_release release;
               store = cluster != nullptr ? KVStore::Create(type, *cluster) : KVStore::Create(type);
             }
             return std::make_unique<PyKVStore>(std::move(store));
           }),
           py::arg("type"), py::arg("cluster") = nullptr,
           "Creates a store; a distributed one on `cluster`'s node when given (the store "
           "holds the node), else joining the job.")
      .def("close", &PyKVStore::Close)
      .def_property_readonly("closed", &PyKVStore::closed)
      .def_property_readonly("type", [](PyKVStore& s) { return s.store().type(); })
      .def_property_readonly("rank", [](PyKVStore& s) { return s.store().Rank(); })
      .def_property_readonly("num_workers", [](PyKVStore& s) { return s.store().NumWorkers(); })
      .def_property_readonly("num_servers", [](PyKVStore& s) { return s.store().NumServers(); })
      .def(
          "init",
          [](PyKVStore& s, py::handle key, py::handle value) {
            const KVKey k = ToKey(key);
            HeldTensor v = HeldTensor::FromPython(value, "init(" + k.ToString() + ") value", false);
            py::gil_scoped_release release;
            s.store().Init(k, v.view());
          },
          py::arg("key"), py::arg("value"))
      .def(
          "push_async",
          [](PyKVStore& s, py::handle key, py::handle values, int priority) {
            const KVKey k = ToKey(key);
            auto held = HoldTensors(values, "push(" + k.ToString() + ") value", false);
            KVHandle h;
            {
              py::gil_scoped_release release;
              h = s.store().PushAsync(k, Views(held), priority);
            }
            return PyKVHandle(std::move(h), std::move(held));
          },
          py::arg("key"), py::arg("values"), py::arg("priority") = 0, py::keep_alive<0, 1>())
      .def(
          "pull_async",
          [](PyKVStore& s, py::handle key, py::handle outs, int priority) {
            const KVKey k = ToKey(key);
            auto held = HoldTensors(outs, "pull(" + k.ToString() + ") out", true);
            KVHandle h;
            {
              py::gil_scoped_release release;
              h = s.store().PullAsync(k, Views(held), priority);
            }
            return PyKVHandle(std::move(h), std::move(held));
          },
          py::arg("key"), py::arg("outs"), py::arg("priority") = 0, py::keep_alive<0, 1>())
      .def(
          "pushpull_async",
          [](PyKVStore& s, py::handle key, py::handle values, py::handle outs, int priority) {
            const KVKey k = ToKey(key);
            auto held = HoldTensors(values, "pushpull(" + k.ToString() + ") value", false);
            auto held_outs = HoldTensors(outs, "pushpull(" + k.ToString() + ") out", true);
            KVHandle h;
            {
              py::gil_scoped_release release;
              h = s.store().PushPullAsync(k, Views(held), Views(held_outs), priority);
            }
            for (auto& o : held_outs) held.push_back(std::move(o));
            return PyKVHandle(std::move(h), std::move(held));
          },
          py::arg("key"), py::arg("values"), py::arg("outs"), py::arg("priority") = 0,
          py::keep_alive<0, 1>())
      .def(
          "row_sparse_pull_async",
          [](PyKVStore& s, py::handle key, py::handle out, std::vector<int64_t> row_ids,
             int priority) {
            const KVKey k = ToKey(key);
            std::vector<HeldTensor> held;
            held.push_back(
                HeldTensor::FromPython(out, "row_sparse_pull(" + k.ToString() + ") out", true));
            KVHandle h;
            {
              py::gil_scoped_release release;
              h = s.store().RowSparsePullAsync(k, held[0].view(), row_ids, priority);
            }
            return PyKVHandle(std::move(h), std::move(held));
          },
          py::arg("key"), py::arg("out"), py::arg("row_ids"), py::arg("priority") = 0,
          py::keep_alive<0, 1>())
      .def(
          "row_sparse_push_async",
          [](PyKVStore& s, py::handle key, py::handle rows, std::vector<int64_t> row_ids,
             int priority) {
            const KVKey k = ToKey(key);
            std::vector<HeldTensor> held;
            held.push_back(
                HeldTensor::FromPython(rows, "row_sparse_push(" + k.ToString() + ") rows", false));
            KVHandle h;
            {
              py::gil_scoped_release release;
              h = s.store().RowSparsePushAsync(k, held[0].view(), row_ids, priority);
            }
            return PyKVHandle(std::move(h), std::move(held));
          },
          py::arg("key"), py::arg("rows"), py::arg("row_ids"), py::arg("priority") = 0,
          py::keep_alive<0, 1>())
      .def(
          "set_optimizer",
          [](PyKVStore& s, const std::string& name, const py::dict& params) {
            KVParams p = ToParams(params);
            py::gil_scoped_release release;
            s.store().SetOptimizer(name, p);
          },
          py::arg("name"), py::arg("params"))
      .def(
          "set_gradient_compression",
          [](PyKVStore& s, const py::dict& params) {
            KVParams p = ToParams(params);
            py::gil_scoped_release release;
            s.store().SetGradientCompression(p);
          },
          py::arg("params"))
      .def("barrier",
           [](PyKVStore& s) {
             Members m;
             {
               py::gil_scoped_release release;
               m = s.store().Barrier();
             }
             return py::make_tuple(m.epoch, m.workers);
           })
      .def(
          "save_optimizer_states",
          [](PyKVStore& s, const std::string& path) {
            py::gil_scoped_release release;
            s.store().SaveOptimizerStates(path);
          },
          py::arg("path"))
      .def(
          "load_optimizer_states",
          [](PyKVStore& s, const std::string& path) {
            py::gil_scoped_release release;
            s.store().LoadOptimizerStates(path);
          },
          py::arg("path"))
      .def(
          "save_checkpoint",
          [](PyKVStore& s, const std::string& dir, const py::bytes& user_state) {
            std::string state = user_state;
            py::gil_scoped_release release;
            return s.store().SaveCheckpoint(dir, state);
          },
          py::arg("dir"), py::arg("user_state"))
      .def(
          "load_checkpoint",
          [](PyKVStore& s, const std::string& dir) -> py::object {
            std::optional<KVCheckpoint> c;
            {
              py::gil_scoped_release release;
              c = s.store().LoadCheckpoint(dir);
            }
            if (!c) return py::none();
            return py::make_tuple(c->round, py::bytes(c->user_state));
          },
          py::arg("dir"));
}

}  // namespace tandem::python
