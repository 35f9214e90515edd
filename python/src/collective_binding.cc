#include "collective_binding.h"

#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "held_tensor.h"
#include "tandem/cluster.h"
#include "tandem/collective.h"
#include "tandem/error.h"
#include "tandem/fusion_engine.h"

namespace py = pybind11;

namespace tandem::python {
namespace {

Reduction ToReduction(const std::string& op) {
  if (op == "average") return Reduction::kAvg;  // Horovod's name (hvd.Average)
  for (Reduction r :
       {Reduction::kSum, Reduction::kAvg, Reduction::kMin, Reduction::kMax, Reduction::kProd}) {
    if (ReductionName(r) == op) return r;
  }
  throw InvalidArgument("unknown reduction '" + op +
                        "'; expected sum, avg (or average), min, max or prod (tandem.Sum, "
                        "tandem.Average, ...)");
}

AllReduceAlgorithm ToAlgorithm(const std::string& name) {
  for (AllReduceAlgorithm a :
       {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kRing, AllReduceAlgorithm::kHalvingDoubling,
        AllReduceAlgorithm::kDirect, AllReduceAlgorithm::kRecursiveDoubling,
        AllReduceAlgorithm::kHierarchical}) {
    if (AllReduceAlgorithmName(a) == name) return a;
  }
  throw InvalidArgument("unknown allreduce algorithm '" + name +
                        "'; expected auto, ring, halving_doubling, direct, recursive_doubling or "
                        "hierarchical");
}

void SetCommon(CollectiveOptions& o, const std::string& name, double timeout_s) {
  o.name = name;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
}

ReduceOptions Reduce(const std::string& op, double prescale, double postscale,
                     const std::string& name, double timeout_s) {
  ReduceOptions o;
  SetCommon(o, name, timeout_s);
  o.op = ToReduction(op);
  o.prescale = prescale;
  o.postscale = postscale;
  return o;
}

/// A queued collective and the tensors it reads and writes, referenced
/// until it is done. Dropping it unfinished waits for it (the communicator
/// still uses the memory).
///
/// Thread-safety: Python calls it with the GIL held; waits release it.
class PyCollectiveHandle {
 public:
  PyCollectiveHandle(CollectiveHandle handle, std::vector<HeldTensor> held)
      : handle_(std::move(handle)), held_(std::move(held)) {}
  PyCollectiveHandle(PyCollectiveHandle&&) = default;
  ~PyCollectiveHandle() {
    if (!held_.empty() && !handle_.Done()) {
      py::gil_scoped_release release;
      try {
        handle_.Wait();
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): dropped unobserved
      }
    }
  }
  void Wait() {
    {
      py::gil_scoped_release release;
      handle_.Wait();
    }
    held_.clear();
  }
  bool Done() const { return handle_.Done(); }

 private:
  CollectiveHandle handle_;
  std::vector<HeldTensor> held_;
};

HeldTensor In(py::handle t, const char* op, const std::string& name) {
  return HeldTensor::FromPython(
      t, std::string(op) + (name.empty() ? "" : "('" + name + "')") + " input", false);
}
HeldTensor Out(py::handle t, const char* op, const std::string& name) {
  return HeldTensor::FromPython(
      t, std::string(op) + (name.empty() ? "" : "('" + name + "')") + " output", true);
}

// Runs `start` (which queues one operation on views) without the GIL and
// wraps its handle with the tensors.
template <typename F>
PyCollectiveHandle Start(std::vector<HeldTensor> held, F start) {
  CollectiveHandle h;
  {
    py::gil_scoped_release release;
    h = start();
  }
  return PyCollectiveHandle(std::move(h), std::move(held));
}

std::vector<HeldTensor> Two(HeldTensor a, HeldTensor b) {
  std::vector<HeldTensor> v;
  v.push_back(std::move(a));
  v.push_back(std::move(b));
  return v;
}

/// The framework engine over every worker, for Python. Closing it (or
/// dropping it) waits for every rank to close theirs, without the GIL.
///
/// Thread-safety: Python calls it with the GIL held.
class PyFusionEngine {
 public:
  explicit PyFusionEngine(Collectives& c) {
    std::vector<int> all(static_cast<size_t>(c.world().size()));
    std::iota(all.begin(), all.end(), 0);
    py::gil_scoped_release release;
    engine_ =
        std::make_unique<FusionEngine>(c.NewGroup(all), FusionEngine::Options::FromEnvironment());
  }
  ~PyFusionEngine() { Close(); }
  FusionEngine& engine() {
    if (!engine_) throw InvalidArgument("the framework engine was closed");
    return *engine_;
  }
  void Close() {
    py::gil_scoped_release release;
    engine_.reset();
  }

 private:
  std::unique_ptr<FusionEngine> engine_;
};

}  // namespace

void RegisterCollectives(py::module_& m) {
  py::class_<PyCollectiveHandle>(m, "CollectiveHandle",
                                 "A queued collective; keeps its tensors alive until done.")
      .def("wait", &PyCollectiveHandle::Wait,
           "Blocks (GIL released) until the operation finished; raises its error.")
      .def("done", &PyCollectiveHandle::Done, "True once the operation finished.");

  // Every operation is asynchronous here (queued on the communicator's
  // thread); tandem/collective.py's blocking functions wait at once.
  py::class_<Communicator>(m, "Communicator", "A group of ranks (include/tandem/collective.h).")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("members", &Communicator::members)
      .def(
          "allreduce_async",
          [](Communicator& c, py::handle in, py::handle out, const std::string& op, double prescale,
             double postscale, const std::string& algorithm, const std::string& name,
             double timeout) {
            ReduceOptions o = Reduce(op, prescale, postscale, name, timeout);
            o.algorithm = ToAlgorithm(algorithm);
            auto held = Two(In(in, "allreduce", name), Out(out, "allreduce", name));
            TensorView vi = held[0].view(), vo = held[1].view();
            return Start(std::move(held), [&] { return c.AllReduceAsync(vi, vo, o); });
          },
          py::arg("input"), py::arg("output"), py::arg("op") = "sum", py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("algorithm") = "auto", py::arg("name") = "",
          py::arg("timeout") = 0.0, py::keep_alive<0, 1>())
      .def(
          "broadcast_async",
          [](Communicator& c, py::handle data, int root, const std::string& name, double timeout) {
            CollectiveOptions o;
            SetCommon(o, name, timeout);
            std::vector<HeldTensor> held;
            held.push_back(Out(data, "broadcast", name));
            TensorView v = held[0].view();
            return Start(std::move(held), [&] { return c.BroadcastAsync(v, root, o); });
          },
          py::arg("data"), py::arg("root"), py::arg("name") = "", py::arg("timeout") = 0.0,
          py::keep_alive<0, 1>())
      .def(
          "allgather_async",
          [](Communicator& c, py::handle in, py::handle out, const std::string& name,
             double timeout) {
            CollectiveOptions o;
            SetCommon(o, name, timeout);
            auto held = Two(In(in, "allgather", name), Out(out, "allgather", name));
            TensorView vi = held[0].view(), vo = held[1].view();
            return Start(std::move(held), [&] { return c.AllGatherAsync(vi, vo, o); });
          },
          py::arg("input"), py::arg("output"), py::arg("name") = "", py::arg("timeout") = 0.0,
          py::keep_alive<0, 1>())
      .def(
          "allgatherv_async",
          [](Communicator& c, py::handle in, py::handle out, std::vector<int64_t> counts,
             const std::string& name, double timeout) {
            CollectiveOptions o;
            SetCommon(o, name, timeout);
            auto held = Two(In(in, "allgather", name), Out(out, "allgather", name));
            TensorView vi = held[0].view(), vo = held[1].view();
            return Start(std::move(held), [&] { return c.AllGatherVAsync(vi, vo, counts, o); });
          },
          py::arg("input"), py::arg("output"), py::arg("counts"), py::arg("name") = "",
          py::arg("timeout") = 0.0, py::keep_alive<0, 1>())
      .def(
          "reduce_scatter_async",
          [](Communicator& c, py::handle in, py::handle out, const std::string& op, double prescale,
             double postscale, const std::string& name, double timeout) {
            ReduceOptions o = Reduce(op, prescale, postscale, name, timeout);
            auto held = Two(In(in, "reduce_scatter", name), Out(out, "reduce_scatter", name));
            TensorView vi = held[0].view(), vo = held[1].view();
            return Start(std::move(held), [&] { return c.ReduceScatterAsync(vi, vo, o); });
          },
          py::arg("input"), py::arg("output"), py::arg("op") = "sum", py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("name") = "", py::arg("timeout") = 0.0,
          py::keep_alive<0, 1>())
      .def(
          "alltoall_async",
          [](Communicator& c, py::handle in, py::handle out, const std::string& name,
             double timeout) {
            CollectiveOptions o;
            SetCommon(o, name, timeout);
            auto held = Two(In(in, "alltoall", name), Out(out, "alltoall", name));
            TensorView vi = held[0].view(), vo = held[1].view();
            return Start(std::move(held), [&] { return c.AllToAllAsync(vi, vo, o); });
          },
          py::arg("input"), py::arg("output"), py::arg("name") = "", py::arg("timeout") = 0.0,
          py::keep_alive<0, 1>())
      .def(
          "barrier_async",
          [](Communicator& c, const std::string& name, double timeout) {
            CollectiveOptions o;
            SetCommon(o, name, timeout);
            return Start({}, [&] { return c.BarrierAsync(o); });
          },
          py::arg("name") = "", py::arg("timeout") = 0.0, py::keep_alive<0, 1>());

  py::class_<PyFusionEngine>(
      m, "FusionEngine",
      "The framework engine (include/tandem/fusion_engine.h) over every worker: named requests "
      "in any order, negotiated across ranks, small allreduces fused, stalls reported.")
      .def(py::init<Collectives&>(), py::arg("collectives"), py::keep_alive<1, 2>())
      .def(
          "allreduce_async",
          [](PyFusionEngine& e, py::handle in, py::handle out, const std::string& op,
             double prescale, double postscale, const std::string& name, double timeout) {
            ReduceOptions o = Reduce(op, prescale, postscale, name, timeout);
            auto held = Two(In(in, "allreduce", name), Out(out, "allreduce", name));
            TensorView vi = held[0].view(), vo = held[1].view();
            FusionEngine& engine = e.engine();
            return Start(std::move(held), [&] { return engine.AllReduce(name, vi, vo, o); });
          },
          py::arg("input"), py::arg("output"), py::arg("op") = "sum", py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("name"), py::arg("timeout") = 0.0,
          py::keep_alive<0, 1>())
      .def(
          "broadcast_async",
          [](PyFusionEngine& e, py::handle data, int root, const std::string& name) {
            std::vector<HeldTensor> held;
            held.push_back(Out(data, "broadcast", name));
            TensorView v = held[0].view();
            FusionEngine& engine = e.engine();
            return Start(std::move(held), [&] { return engine.Broadcast(name, v, root); });
          },
          py::arg("data"), py::arg("root"), py::arg("name"), py::keep_alive<0, 1>())
      .def(
          "stats",
          [](PyFusionEngine& e) {
            const FusionEngine::Stats s = e.engine().stats();
            py::dict d;
            d["cycles"] = s.cycles;
            d["negotiated"] = s.negotiated;
            d["cached"] = s.cached;
            d["collectives"] = s.collectives;
            d["fused_tensors"] = s.fused_tensors;
            d["mismatches"] = s.mismatches;
            d["stalls_reported"] = s.stalls_reported;
            d["stalls_failed"] = s.stalls_failed;
            d["last_report"] = s.last_report;
            d["fusion_threshold"] = s.fusion_threshold;
            d["cycle_time_ms"] = static_cast<double>(s.cycle_time.count()) / 1000.0;
            d["algorithm"] = AllReduceAlgorithmName(s.algorithm);
            d["autotune_samples"] = s.autotune_samples;
            d["autotune_done"] = s.autotune_done;
            return d;
          },
          "The engine's counters (FusionEngine::Stats) as a dict.")
      .def("close", &PyFusionEngine::Close,
           "Stops the engine; returns once every rank closed theirs (GIL released).");

  py::class_<Collectives>(m, "Collectives",
                          "A worker's collectives: its membership in the job and the mesh "
                          "of connections to the other workers.")
      .def(py::init([](Cluster* cluster) {
             py::gil_scoped_release release;
             return cluster != nullptr ? Collectives::Open(*cluster) : Collectives::Join();
           }),
           py::arg("cluster") = nullptr,
           "Joins the job, or opens the collectives on `cluster`'s node (which must outlive "
           "this object's use of it only until this returns: the collectives hold the node).")
      .def_property_readonly("rank", [](Collectives& c) { return c.world().rank(); })
      .def_property_readonly("size", [](Collectives& c) { return c.world().size(); })
      .def("world", &Collectives::world, py::return_value_policy::reference_internal)
      .def(
          "new_group",
          [](Collectives& c, const std::vector<int>& ranks) {
            py::gil_scoped_release release;
            return c.NewGroup(ranks);
          },
          py::arg("world_ranks"), py::keep_alive<0, 1>())
      .def(
          "regroup",
          [](Collectives& c) {
            Members members;
            {
              py::gil_scoped_release release;
              members = c.Regroup();
            }
            return py::make_tuple(members.epoch, members.workers);
          },
          "Collectives::Regroup: after MembershipChanged, a barrier of the remaining workers, "
          "then the world over them; returns (epoch, workers).")
      .def(
          "check_joins",
          [](Collectives& c) {
            py::gil_scoped_release release;
            c.CheckJoins();
          },
          "Collectives::CheckJoins: raises MembershipChanged when workers wait to join (rank "
          "0's view, broadcast); every member calls it at the same point.")
      .def("finalize", [](Collectives& c) {
        py::gil_scoped_release release;
        c.Finalize();
      });
}

}  // namespace tandem::python
