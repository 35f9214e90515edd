// Collective bandwidth and latency, in the form of nccl-tests' tables.
// Run one process per rank through the launcher:
//
//   tandem launch -n 4 --no-scheduler -- collective_bench --op allreduce
//
// Per size (--min-bytes to --max-bytes, times --factor): a correctness pass
// (inputs rank+1 or closed-form values; #wrong counts the elements off the
// expected value), --warmup untimed iterations, then --iters timed ones,
// each preceded by a barrier; an iteration's time is the maximum over the
// ranks, and the table shows the median (and p90) of those. Sizes are
// nccl-tests': the total payload of one rank (allgather: the gathered
// output; reduce_scatter: the input). algbw = size / time; busbw = algbw x
// 2(n-1)/n for allreduce, (n-1)/n for allgather and reduce_scatter, 1 for
// broadcast. Rank 0 prints; --json prints one JSON object per size
// instead, the format the peer programs (Gloo, OpenMPI) print too.
//
// --compare-call-check ROUNDS measures what the call checks cost
// (docs/collectives.md "Call checks"): per size, ROUNDS rounds each timing
// --iters iterations with the checks on, then with them off (every rank
// switches after a barrier), and prints the median over rounds of each
// round's median, and their ratio. With --both-checked the second arm is
// checked too: the ratio then shows the measurement's own noise.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/environment.h"
#include "cluster/node.h"
#include "collective/collective_service.h"
#include "tandem/collective.h"
#include "tandem/error.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string op = "allreduce";
  size_t min_bytes = 4 << 10;
  size_t max_bytes = size_t{256} << 20;
  size_t factor = 4;
  int iters = 0;  // 0: by size
  int warmup = 0;
  bool json = false;
  int compare_call_check = 0;  // rounds; 0: the plain table
  bool both_checked = false;   // --compare-call-check's control run
  tandem::AllReduceAlgorithm algorithm = tandem::AllReduceAlgorithm::kAuto;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw tandem::InvalidArgument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--op")
      a.op = next();
    else if (k == "--min-bytes")
      a.min_bytes = std::stoull(next());
    else if (k == "--max-bytes")
      a.max_bytes = std::stoull(next());
    else if (k == "--factor")
      a.factor = std::stoull(next());
    else if (k == "--iters")
      a.iters = std::stoi(next());
    else if (k == "--warmup")
      a.warmup = std::stoi(next());
    else if (k == "--json")
      a.json = true;
    else if (k == "--compare-call-check")
      a.compare_call_check = std::stoi(next());
    else if (k == "--both-checked")
      a.both_checked = true;
    else if (k == "--algorithm") {
      std::string v = next();
      a.algorithm = v == "ring"                 ? tandem::AllReduceAlgorithm::kRing
                    : v == "halving_doubling"   ? tandem::AllReduceAlgorithm::kHalvingDoubling
                    : v == "direct"             ? tandem::AllReduceAlgorithm::kDirect
                    : v == "recursive_doubling" ? tandem::AllReduceAlgorithm::kRecursiveDoubling
                    : v == "hierarchical"       ? tandem::AllReduceAlgorithm::kHierarchical
                                                : tandem::AllReduceAlgorithm::kAuto;
    } else {
      throw tandem::InvalidArgument(
          "unknown argument " + k +
          " (--op allreduce|broadcast|allgather|reduce_scatter, "
          "--min-bytes, --max-bytes, --factor, --iters, --warmup, "
          "--algorithm, --json, --compare-call-check ROUNDS, --both-checked)");
    }
  }
  if (a.op != "allreduce" && a.op != "broadcast" && a.op != "allgather" &&
      a.op != "reduce_scatter") {
    throw tandem::InvalidArgument("--op " + a.op + " is not a benchmarked operation");
  }
  return a;
}

double BusFactor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

struct Case {
  tandem::Communicator& world;
  const Args& args;
  size_t bytes;  // per nccl-tests' convention
  std::vector<float> a, b;

  Case(tandem::Communicator& w, const Args& ar, size_t by) : world(w), args(ar), bytes(by) {
    const size_t n = static_cast<size_t>(w.size());
    const size_t count = bytes / sizeof(float);
    if (args.op == "allreduce" || args.op == "broadcast") {
      a.resize(count);
    } else if (args.op == "allgather") {
      a.resize(count / n);
      b.resize(count / n * n);
    } else {
      a.resize(count / n * n);
      b.resize(count / n);
    }
  }
  tandem::TensorView V(std::vector<float>& v) {
    return {v.empty() ? nullptr : v.data(), tandem::DType::kF32, {static_cast<int64_t>(v.size())}};
  }
  void Fill() {
    const float r = static_cast<float>(world.rank() + 1);
    std::fill(a.begin(), a.end(), r);
    std::fill(b.begin(), b.end(), 0.0f);
  }
  void Run() {
    tandem::ReduceOptions o;
    o.algorithm = args.algorithm;
    if (args.op == "allreduce")
      world.AllReduce(V(a), V(a), o);
    else if (args.op == "broadcast")
      world.Broadcast(V(a), 0);
    else if (args.op == "allgather")
      world.AllGather(V(a), V(b));
    else
      world.ReduceScatter(V(a), V(b), o);
  }
  // Elements off the closed form after one Run() on Fill()ed buffers.
  int64_t Wrong() {
    const int n = world.size();
    int64_t wrong = 0;
    if (args.op == "allreduce" || args.op == "reduce_scatter") {
      const float want = static_cast<float>(n * (n + 1) / 2);
      for (float x : args.op == "allreduce" ? a : b) wrong += x != want;
    } else if (args.op == "broadcast") {
      for (float x : a) wrong += x != 1.0f;
    } else {
      const size_t block = a.size();
      for (size_t i = 0; i < b.size(); ++i) wrong += b[i] != static_cast<float>(i / block + 1);
    }
    return wrong;
  }
  size_t count() const { return bytes / sizeof(float); }
};

// The maximum over ranks of each value (an allreduce of max).
std::vector<double> MaxOverRanks(tandem::Communicator& w, std::vector<double> v) {
  tandem::ReduceOptions o;
  o.op = tandem::Reduction::kMax;
  tandem::TensorView t{v.data(), tandem::DType::kF64, {static_cast<int64_t>(v.size())}};
  w.AllReduce(t, t, o);
  return v;
}

// --iters, or as many as move 512 MiB (5 to 200).
int Iterations(const Args& args, size_t bytes) {
  return args.iters > 0 ? args.iters
                        : static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / bytes, 5, 200));
}

// `iters` timed runs of `c`, each preceded by a barrier: each run's time
// is the maximum over the ranks; sorted, in microseconds.
std::vector<double> TimedRuns(tandem::Communicator& world, Case& c, int iters) {
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    world.Barrier();
    auto t0 = Clock::now();
    c.Run();
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  times = MaxOverRanks(world, times);
  std::sort(times.begin(), times.end());
  return times;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --compare-call-check: rounds of checked and unchecked runs, alternating.
void CompareCallCheck(tandem::collective::CollectiveService& service, const Args& args) {
  tandem::Communicator& world = service.World();
  const bool print = world.rank() == 0;
  if (print) {
    std::printf("# tandem %s, %d ranks, float32: call checks on and %s, %d rounds\n",
                args.op.c_str(), world.size(), args.both_checked ? "on (control)" : "off",
                args.compare_call_check);
    std::printf("%12s %14s %14s %8s %8s\n", "size(B)", "checked(us)", "unchecked(us)", "ratio",
                "#wrong");
  }
  for (size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= args.factor) {
    Case c(world, args, bytes);
    const int iters = Iterations(args, bytes);
    std::vector<double> on, off;
    double wrong = 0;
    for (int round = 0; round < args.compare_call_check; ++round) {
      for (bool checked : {true, false}) {
        world.Barrier();
        service.mesh().SetCallChecksForBenchmark(checked || args.both_checked);
        world.Barrier();
        c.Fill();
        c.Run();
        wrong = std::max(wrong, static_cast<double>(c.Wrong()));
        for (int i = 0; i < std::max(1, args.warmup); ++i) c.Run();
        const std::vector<double> times = TimedRuns(world, c, iters);
        (checked ? on : off).push_back(times[times.size() / 2]);
      }
    }
    world.Barrier();
    service.mesh().SetCallChecksForBenchmark(true);
    world.Barrier();
    wrong = MaxOverRanks(world, {wrong})[0];
    const double t_on = Median(on), t_off = Median(off);
    if (print) {
      std::printf("%12zu %14.1f %14.1f %8.3f %8lld\n", bytes, t_on, t_off, t_on / t_off,
                  static_cast<long long>(wrong));
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = Parse(argc, argv);
    // Joined as tandem::Collectives::Join() does, keeping the service, whose
    // mesh --compare-call-check switches.
    std::unique_ptr<tandem::collective::CollectiveService> service;
    auto node = tandem::cluster::JoinNode(
        tandem::base::Environment::FromProcess(), [&](tandem::cluster::NodeServices& s) {
          service = std::make_unique<tandem::collective::CollectiveService>(
              s, tandem::collective::CollectiveSettings::FromEnvironment(s.env, s.config));
        });
    service->Start();
    tandem::Communicator& world = service->World();
    if (args.compare_call_check > 0) {
      CompareCallCheck(*service, args);
      world.Barrier({"finalize", {}});
      service->StopWorld();
      node->Finalize();
      return 0;
    }
    const int n = world.size();
    const bool print = world.rank() == 0;

    if (print && !args.json) {
      std::printf("# tandem %s, %d ranks, float32, algorithm %s\n", args.op.c_str(), n,
                  tandem::AllReduceAlgorithmName(args.algorithm).c_str());
      std::printf("%12s %12s %8s %6s %11s %8s %8s %10s %8s\n", "size(B)", "count", "type", "redop",
                  "time(us)", "algbw", "busbw", "p90(us)", "#wrong");
      std::fflush(stdout);
    }
    for (size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= args.factor) {
      Case c(world, args, bytes);
      c.Fill();
      c.Run();
      double wrong = static_cast<double>(c.Wrong());
      wrong = MaxOverRanks(world, {wrong})[0];
      const int iters = Iterations(args, bytes);
      const int warmup = args.warmup > 0 ? args.warmup : std::max(2, iters / 10);
      for (int i = 0; i < warmup; ++i) c.Run();
      const std::vector<double> times = TimedRuns(world, c, iters);
      const double median = times[times.size() / 2];
      const double p90 = times[std::min(times.size() - 1, times.size() * 9 / 10)];
      const double algbw = static_cast<double>(bytes) / median / 1e3;  // GB/s
      const double busbw = algbw * BusFactor(args.op, n);
      const char* redop = (args.op == "allreduce" || args.op == "reduce_scatter") ? "sum" : "none";
      if (print && args.json) {
        std::printf(
            "{\"impl\":\"tandem\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"count\":%zu,"
            "\"dtype\":\"float32\",\"time_us\":%.2f,\"p90_us\":%.2f,\"algbw\":%.4f,\"busbw\":%.4f,"
            "\"wrong\":%lld}\n",
            args.op.c_str(), n, bytes, c.count(), median, p90, algbw, busbw,
            static_cast<long long>(wrong));
      } else if (print) {
        std::printf("%12zu %12zu %8s %6s %11.1f %8.3f %8.3f %10.1f %8lld\n", bytes, c.count(),
                    "float", redop, median, algbw, busbw, p90, static_cast<long long>(wrong));
      }
      std::fflush(stdout);
    }
    world.Barrier({"finalize", {}});
    service->StopWorld();
    node->Finalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: error: %s\n", e.what());
    return 1;
  }
}
