// A job of N workers as threads over the in-process transport, each with a
// CollectiveService started, for the collective tests; and the element
// helpers the tests use to fill and read tensors of any dtype as doubles.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "collective/collective_service.h"
#include "support/inproc_job.h"
#include "support/sanitizer.h"
#include "tandem/collective.h"

namespace tandem::collective::testing {

using tandem::testing::Is;
using tandem::testing::TestJob;
using tandem::testing::TestNode;
using tandem::testing::Timings;
using tandem::testing::What;

// The collectives' default patience in these tests: 20 s, and 120 s under
// ThreadSanitizer, where every step costs 5-15 times as much and 16 ranks of
// 3 MiB (Hierarchical n16_hierarchical_8_per_host) took 33 s on a CI machine
// of 2 cores. Tests of the time-outs themselves pass their own.
inline constexpr std::chrono::milliseconds kTestPatience =
    std::chrono::seconds(tandem::testing::kUnderTsan ? 120 : 20);

inline CollectiveSettings TestSettings(std::chrono::milliseconds timeout = kTestPatience,
                                       int connections = 1, size_t segment_bytes = 64 << 10,
                                       bool same_host_copy = true,
                                       std::optional<std::chrono::microseconds> spin = {}) {
  CollectiveSettings s;
  s.mesh.connections_per_peer = connections;
  s.mesh.same_host_copy = same_host_copy;
  s.mesh.spin = spin;
  s.mesh.connect_timeout = std::chrono::seconds(10);
  s.communicator.timeout = timeout;
  s.communicator.segment_bytes = segment_bytes;
  return s;
}

/// Workers 0..n-1 (node i is worker rank i), each with its service; each
/// on a host of its own, or with `per_host` > 0, workers i and j on one
/// host when i / per_host == j / per_host.
class CollectiveJob {
 public:
  /// `env`: further variables for every node (TANDEM_MIN_WORKERS, which
  /// the scheduler reads, for an elastic job).
  /// `joiners`: further workers that RunAll leaves alone, each to join the
  /// running elastic job through RunJoiner (hosts of their own).
  explicit CollectiveJob(int n, CollectiveSettings settings = TestSettings(), Timings t = {},
                         int per_host = 0, std::map<std::string, std::string> env = {},
                         int joiners = 0)
      : n_(n) {
    job_ = std::make_unique<TestJob>(0, n, t, nullptr, std::move(env));
    for (int i = 0; i < n; ++i) {
      TestNode* node = job_->Add(Role::kWorker, i, nullptr,
                                 per_host > 0 ? "host-" + std::to_string(i / per_host) : "");
      services_.push_back(std::make_unique<CollectiveService>(node->services(), settings));
    }
    for (int j = 0; j < joiners; ++j) {
      TestNode* node = job_->AddLate(Role::kWorker, "joiner-" + std::to_string(j));
      joiner_nodes_.push_back(node);
      joiner_services_.push_back(std::make_unique<CollectiveService>(node->services(), settings));
    }
  }
  ~CollectiveJob() {
    for (auto& s : services_) s->StopWorld();
    for (auto& s : joiner_services_) s->StopWorld();
    job_.reset();
    services_.clear();
    joiner_services_.clear();
  }

  /// Joiner `j` registers with the running job (it waits until the workers
  /// admit it at a regroup), starts its service, then runs body(its worker
  /// rank, service). Returns its exception, if any. Any thread; once per
  /// joiner.
  std::exception_ptr RunJoiner(int j, const std::function<void(int, CollectiveService&)>& body) {
    try {
      TestNode* node = joiner_nodes_[static_cast<size_t>(j)];
      node->node->Join();
      CollectiveService& s = *joiner_services_[static_cast<size_t>(j)];
      s.Start();
      body(node->membership->self().rank, s);
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  }
  TestNode& joiner(int j) { return *joiner_nodes_[static_cast<size_t>(j)]; }
  TestNode& scheduler() { return job_->scheduler(); }

  /// Joins every node, starts every service, then runs body(rank, service)
  /// on each worker's thread. Returns each worker's exception (by rank).
  std::vector<std::exception_ptr> Run(const std::function<void(int, CollectiveService&)>& body) {
    failed_at_.assign(static_cast<size_t>(n_), {});
    auto all = job_->RunAll([&](cluster::Membership& m) {
      if (m.self().role != Role::kWorker) return;
      const int rank = m.self().rank;
      CollectiveService& s = *services_[static_cast<size_t>(rank)];
      try {
        s.Start();
        body(rank, s);
      } catch (...) {
        failed_at_[static_cast<size_t>(rank)] = std::chrono::steady_clock::now();
        throw;
      }
    });
    all.pop_back();  // the scheduler's
    return all;
  }

  /// Runs and expects no worker to fail. Failures are reported in the order
  /// they happened, so the first one (usually the cause of the others'
  /// "lost worker") comes first with its time relative to it.
  void RunOk(const std::function<void(int, CollectiveService&)>& body) {
    auto errors = Run(body);
    std::vector<size_t> failed;
    for (size_t i = 0; i < errors.size(); ++i) {
      if (errors[i] != nullptr) failed.push_back(i);
    }
    std::stable_sort(failed.begin(), failed.end(),
                     [&](size_t a, size_t b) { return failed_at_[a] < failed_at_[b]; });
    for (size_t i : failed) {
      const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
          failed_at_[i] - failed_at_[failed.front()]);
      ADD_FAILURE() << "worker " << i << " (failed " << after.count()
                    << " ms after the first failure): " << What(errors[i]);
    }
  }

  TestNode& node(int rank) { return job_->node(static_cast<size_t>(rank)); }
  CollectiveService& service(int rank) { return *services_[static_cast<size_t>(rank)]; }
  int size() const { return n_; }

 private:
  int n_;
  std::vector<std::chrono::steady_clock::time_point>
      failed_at_;  // by rank: when each worker threw (Run)
  std::vector<std::unique_ptr<CollectiveService>> services_;  // outlive job_'s transports
  std::vector<TestNode*> joiner_nodes_;                       // owned by job_
  std::vector<std::unique_ptr<CollectiveService>> joiner_services_;
  std::unique_ptr<TestJob> job_;
};

/// A tensor of `count` elements of `dtype`, owned.
struct Buffer {
  DType dtype = DType::kF32;
  std::vector<std::byte> bytes;
  int64_t count = 0;

  Buffer(DType d, int64_t n) : dtype(d), bytes(static_cast<size_t>(n) * ElementSize(d)), count(n) {}
  TensorView view() { return TensorView{bytes.empty() ? nullptr : bytes.data(), dtype, {count}}; }

  double Get(int64_t i) const {
    return base::VisitDType(dtype, [&](auto type) -> double {
      using T = typename decltype(type)::type;
      T v;
      std::memcpy(&v, bytes.data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
      if constexpr (std::is_same_v<T, base::Half>)
        return base::HalfToFloat(v);
      else if constexpr (std::is_same_v<T, base::BFloat16>)
        return base::BFloat16ToFloat(v);
      else
        return static_cast<double>(v);
    });
  }
  void Set(int64_t i, double x) {
    base::VisitDType(dtype, [&](auto type) {
      using T = typename decltype(type)::type;
      T v;
      if constexpr (std::is_same_v<T, base::Half>)
        v = base::FloatToHalf(static_cast<float>(x));
      else if constexpr (std::is_same_v<T, base::BFloat16>)
        v = base::FloatToBFloat16(static_cast<float>(x));
      else
        v = static_cast<T>(x);
      std::memcpy(bytes.data() + static_cast<size_t>(i) * sizeof(T), &v, sizeof(T));
    });
  }
};

/// The unit roundoff of a floating-point dtype (half an ulp of 1); 0 for
/// integers.
inline double UnitRoundoff(DType d) {
  switch (d) {
    case DType::kF32:
      return 0x1p-24;
    case DType::kF64:
      return 0x1p-53;
    case DType::kF16:
      return 0x1p-11;
    case DType::kBF16:
      return 0x1p-8;
    default:
      return 0;
  }
}

}  // namespace tandem::collective::testing
