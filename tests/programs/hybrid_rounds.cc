// A worker of tests/system/test_hybrid_node.py: one process joins its job
// once (tandem::Cluster::Join) and uses the parameter server and the
// collectives on that one node, interleaved, every result checked exactly.
//
// Each round r (1-based), on W workers:
//   - an allreduce of (rank + 1) * r is started asynchronously;
//   - meanwhile a dist_sync push-pull of rank + r on key 0 must give
//     W(W-1)/2 + W r;
//   - the allreduce must give r W(W+1)/2;
//   - a broadcast from worker r % W of its round number plus its rank must
//     give r + r % W on every worker.
// The store's, the collectives' and the cluster's ranks must agree.
//
// Output (stdout, flushed per line):
//   hybrid: rank=<r> round=<n> ok       (every round)
//   hybrid: ok kind=cxx rank=<r> size=<W> checks=<c>
// On an error, stderr gets "hybrid_rounds (worker <r>, pid <p>): error:
// <what>" and the exit code is tandem's for it (200 for a lost peer).
//
//   hybrid_rounds --rounds N [--pause-ms M]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/exit_code.h"
#include "tandem/cluster.h"
#include "tandem/collective.h"
#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace {

using tandem::DType;
using tandem::TensorView;

struct Options {
  long rounds = 10;
  int pause_ms = 0;
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    char* end = nullptr;
    const long v = std::strtol(argv[i + 1], &end, 10);
    if (end == argv[i + 1] || *end != '\0' || v < 0) {
      throw tandem::InvalidArgument("hybrid_rounds: " + flag + " needs a whole number, got '" +
                                    argv[i + 1] + "'");
    }
    if (flag == "--rounds") {
      o.rounds = v;
    } else if (flag == "--pause-ms") {
      o.pause_ms = static_cast<int>(v);
    } else {
      throw tandem::InvalidArgument("hybrid_rounds: unknown argument '" + flag + "'");
    }
  }
  if (argc % 2 == 0) throw tandem::InvalidArgument("hybrid_rounds: a flag lacks its value");
  return o;
}

TensorView View(std::vector<float>& v) {
  return {v.data(), DType::kF32, {static_cast<int64_t>(v.size())}};
}

void Expect(const std::vector<float>& got, float want, const std::string& what, long round) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want) {
      throw std::runtime_error(what + " of round " + std::to_string(round) + ": element " +
                               std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
                               std::to_string(want));
    }
  }
}

int RunWorker(const Options& o, int& rank_out) {
  auto cluster = tandem::Cluster::Join();
  auto kv = tandem::KVStore::Create("dist_sync", *cluster);
  auto collectives = tandem::Collectives::Open(*cluster);
  tandem::Communicator& world = collectives->world();
  const int rank = cluster->rank();
  rank_out = rank;
  const int w = cluster->num_workers();
  if (kv->Rank() != rank || world.rank() != rank || kv->NumWorkers() != w || world.size() != w) {
    throw std::runtime_error("ranks disagree: cluster " + std::to_string(rank) + "/" +
                             std::to_string(w) + ", store " + std::to_string(kv->Rank()) + "/" +
                             std::to_string(kv->NumWorkers()) + ", collectives " +
                             std::to_string(world.rank()) + "/" + std::to_string(world.size()));
  }
  std::vector<float> pushed(8), pulled(8), reduced(8), shared(8);
  kv->Init(0, View(pulled));
  long checks = 0;
  for (long r = 1; r <= o.rounds; ++r) {
    std::vector<float> mine(reduced.size(), static_cast<float>((rank + 1) * r));
    auto reduce = world.AllReduceAsync(View(mine), View(reduced));
    pushed.assign(pushed.size(), static_cast<float>(rank + r));
    kv->PushPull(0, View(pushed), View(pulled));
    Expect(pulled, static_cast<float>(w * (w - 1) / 2 + w * r), "push-pull", r);
    reduce.Wait();
    Expect(reduced, static_cast<float>(r * w * (w + 1) / 2), "allreduce", r);
    const int root = static_cast<int>(r % w);
    shared.assign(shared.size(), static_cast<float>(r + rank));
    world.Broadcast(View(shared), root);
    Expect(shared, static_cast<float>(r + root), "broadcast", r);
    checks += 3;
    std::printf("hybrid: rank=%d round=%ld ok\n", rank, r);
    std::fflush(stdout);
    if (o.pause_ms > 0) usleep(static_cast<useconds_t>(o.pause_ms) * 1000);
  }
  // Each gives up its hold; the last (the cluster) runs the final barrier.
  collectives->Finalize();
  kv->Leave();
  cluster->Finalize();
  std::printf("hybrid: ok kind=cxx rank=%d size=%d checks=%ld\n", rank, w, checks);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  try {
    const Options o = Parse(argc, argv);
    if (auto code = tandem::ServeAssignedRole()) return *code;
    return RunWorker(o, rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid_rounds (worker %s, pid %d): error: %s\n",
                 rank >= 0 ? std::to_string(rank).c_str() : "?", getpid(), e.what());
    return tandem::base::ExitCodeFor(e);
  }
}
