// Gloo's allreduce on loopback TCP, measured the way tandem's
// collective_bench measures its own (bench/peers/collective_report.h), so
// bench/compare_collectives.py can put them side by side.
//
//   gloo_collective_bench --ranks 4 --algo ring [--min-bytes 4K] [--max-bytes 64M]
//                         [--factor 2] [--iters 20] [--warmup 5] [--json]
//
// The process forks --ranks ranks (before any thread exists); they meet
// through a Gloo FileStore in a fresh temporary directory and connect a full
// mesh of TCP pairs on 127.0.0.1. One algorithm per run, as
// /work/shared/BENCHMARKING.md advises (a legacy algorithm followed by
// gloo::allreduce on one context hung at 16 MiB and more):
//
//   ring             gloo::AllreduceRing (legacy, unchunked)
//   ring_chunked     gloo::AllreduceRingChunked (legacy)
//   halving_doubling gloo::AllreduceHalvingDoubling (legacy)
//   allreduce_ring   gloo::allreduce with Algorithm::RING (the current API)
//
// With --rank R --store DIR [--host ADDR] the process runs one rank that
// someone else started, bound to ADDR: one rank per host of the multi-host
// bed, meeting through a FileStore in a directory the hosts share
// (docs/benchmarks.md, "The multi-host bed").
//
// Each rank sends its per-iteration times to rank 0 through the store (not
// through the data plane, which stays the algorithm's alone); rank 0 prints.
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "collective_report.h"

namespace {

using tandem::bench::ParseBytes;
using tandem::bench::SizeResult;

struct Options {
  int ranks = 4;
  std::string algo = "ring";
  size_t min_bytes = 4096;
  size_t max_bytes = 64u << 20;
  size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  bool json = false;
  int timeout_s = 300;
  // Set to run one rank under an outside launcher instead of forking.
  int rank = -1;
  std::string store_dir;
  // The address this rank's Gloo device binds to and announces.
  std::string host = "127.0.0.1";
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "gloo_collective_bench: %s\n"
               "usage: gloo_collective_bench --ranks N --algo "
               "ring|ring_chunked|halving_doubling|allreduce_ring\n"
               "       [--min-bytes 4K] [--max-bytes 64M] [--factor 2] [--iters 20] "
               "[--warmup 5] [--json] [--timeout S]\n"
               "       [--rank R --store DIR [--host ADDR]   (one rank, started by someone else;\n"
               "        ADDR: the address it binds to, 127.0.0.1 unless given)]\n",
               why);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--ranks")
      o.ranks = std::stoi(value());
    else if (a == "--algo")
      o.algo = value();
    else if (a == "--min-bytes")
      o.min_bytes = ParseBytes(value());
    else if (a == "--max-bytes")
      o.max_bytes = ParseBytes(value());
    else if (a == "--factor")
      o.factor = std::stoul(value());
    else if (a == "--iters")
      o.iters = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--timeout")
      o.timeout_s = std::stoi(value());
    else if (a == "--rank")
      o.rank = std::stoi(value());
    else if (a == "--store")
      o.store_dir = value();
    else if (a == "--host")
      o.host = value();
    else if (a == "--json")
      o.json = true;
    else
      Usage(("unknown argument " + a).c_str());
  }
  if (o.ranks < 1 || o.iters < 1 || o.warmup < 0) Usage("ranks and iters must be >= 1");
  if (o.algo != "ring" && o.algo != "ring_chunked" && o.algo != "halving_doubling" &&
      o.algo != "allreduce_ring") {
    Usage(("unknown algorithm " + o.algo).c_str());
  }
  if (o.min_bytes < 4 || o.min_bytes % 4 != 0) Usage("sizes must be multiples of 4 bytes");
  return o;
}

// One operation of the chosen algorithm over `buf`, and a barrier of the same
// API family, so that one run never mixes the legacy and the current API.
struct Runner {
  std::function<void()> run;
  std::function<void()> barrier;
};

Runner MakeRunner(const Options& o, const std::shared_ptr<gloo::Context>& ctx,
                  std::vector<float>& buf, uint32_t& tag) {
  const int count = static_cast<int>(buf.size());
  std::vector<float*> ptrs{buf.data()};
  Runner r;
  if (o.algo == "allreduce_ring") {
    float* data = buf.data();
    size_t n = buf.size();
    r.run = [ctx, data, n, &tag] {
      gloo::AllreduceOptions opts(ctx);
      opts.setOutput(data, n);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(tag++);
      gloo::allreduce(opts);
    };
    r.barrier = [ctx, &tag] {
      gloo::BarrierOptions opts(ctx);
      opts.setTag(tag++);
      gloo::barrier(opts);
    };
    return r;
  }
  std::shared_ptr<gloo::Algorithm> algo;
  if (o.algo == "ring") {
    algo = std::make_shared<gloo::AllreduceRing<float>>(ctx, ptrs, count);
  } else if (o.algo == "ring_chunked") {
    algo = std::make_shared<gloo::AllreduceRingChunked<float>>(ctx, ptrs, count);
  } else {
    algo = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, count);
  }
  auto barrier = std::make_shared<gloo::BarrierAllToOne>(ctx);
  r.run = [algo] { algo->run(); };
  r.barrier = [barrier] { barrier->run(); };
  return r;
}

// Runs one rank; rank 0 prints the report. Returns the exit code.
int RunRank(const Options& o, int rank) {
  gloo::transport::tcp::attr attr;
  attr.hostname = o.host;  // loopback unless --host (a bed's host address)
  attr.ai_family = AF_INET;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(o.store_dir);
  gloo::rendezvous::PrefixStore prefix(o.algo, store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.ranks);
  ctx->setTimeout(std::chrono::seconds(o.timeout_s));
  ctx->connectFullMesh(prefix, device);

  const float expected = static_cast<float>(o.ranks) * static_cast<float>(o.ranks + 1) / 2;
  uint32_t tag = 1;
  std::ostringstream record;  // "bytes wrong t0 t1 ..." per size
  const auto sizes = tandem::bench::Sizes(o.min_bytes, o.max_bytes, o.factor);
  for (size_t bytes : sizes) {
    std::vector<float> buf(bytes / 4);
    Runner r = MakeRunner(o, ctx, buf, tag);
    // Correctness: inputs rank+1, so every element must be n(n+1)/2.
    std::fill(buf.begin(), buf.end(), static_cast<float>(rank + 1));
    r.barrier();
    r.run();
    uint64_t wrong = 0;
    for (float v : buf) wrong += v != expected;
    std::fill(buf.begin(), buf.end(), 1.0f / static_cast<float>(o.ranks));
    for (int i = 0; i < o.warmup; ++i) r.run();
    record << bytes << ' ' << wrong;
    for (int i = 0; i < o.iters; ++i) {
      r.barrier();
      auto t0 = std::chrono::steady_clock::now();
      r.run();
      auto t1 = std::chrono::steady_clock::now();
      record << ' ' << std::chrono::duration<double>(t1 - t0).count();
    }
    record << '\n';
  }
  std::string text = record.str();
  prefix.set("result/" + std::to_string(rank), std::vector<char>(text.begin(), text.end()));
  if (rank != 0) {
    // Stay until rank 0 is past its last operation: a rank that exits closes
    // its pairs, and Gloo fails a peer whose pair sees that close while it
    // still waits on it, even if every byte it needed had arrived.
    prefix.wait({"done"}, std::chrono::seconds(o.timeout_s));
    return 0;
  }

  // Rank 0: gather every rank's record and print.
  std::vector<std::string> keys;
  for (int q = 0; q < o.ranks; ++q) keys.push_back("result/" + std::to_string(q));
  prefix.wait(keys, std::chrono::seconds(o.timeout_s));
  std::vector<std::vector<std::vector<double>>> seconds(sizes.size(),
                                                        std::vector<std::vector<double>>(o.ranks));
  std::vector<uint64_t> wrong(sizes.size(), 0);
  for (int q = 0; q < o.ranks; ++q) {
    std::vector<char> raw = prefix.get(keys[q]);
    std::istringstream in(std::string(raw.begin(), raw.end()));
    for (size_t s = 0; s < sizes.size(); ++s) {
      size_t bytes = 0;
      uint64_t w = 0;
      in >> bytes >> w;
      if (!in || bytes != sizes[s]) {
        std::fprintf(stderr, "gloo_collective_bench: rank %d's record is garbled\n", q);
        return 1;
      }
      wrong[s] += w;
      seconds[s][q].resize(o.iters);
      for (int i = 0; i < o.iters; ++i) in >> seconds[s][q][i];
    }
  }
  prefix.set("done", std::vector<char>{'1'});
  const std::string impl = "gloo_" + o.algo;
  if (!o.json) tandem::bench::PrintHeader(stdout, impl, "allreduce", o.ranks);
  uint64_t total_wrong = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    SizeResult res = tandem::bench::Summarize(impl, "allreduce", "sum", o.ranks, sizes[s],
                                              sizes[s] / 4, seconds[s], wrong[s]);
    total_wrong += res.wrong;
    if (o.json) {
      tandem::bench::PrintJson(stdout, res);
    } else {
      tandem::bench::PrintRow(stdout, res);
    }
  }
  std::fflush(stdout);
  return total_wrong == 0 ? 0 : 3;
}

int RunGuarded(const Options& o, int rank) {
  try {
    return RunRank(o, rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_collective_bench: rank %d of %d (%s): %s\n", rank, o.ranks,
                 o.algo.c_str(), e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  if (o.rank >= 0) {
    if (o.store_dir.empty()) Usage("--rank needs --store DIR");
    return RunGuarded(o, o.rank);
  }
  char dir_template[] = "/tmp/gloo_collective_bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("gloo_collective_bench: mkdtemp");
    return 1;
  }
  o.store_dir = dir_template;
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int rank = 0; rank < o.ranks; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("gloo_collective_bench: fork");
      for (pid_t c : children) kill(c, SIGTERM);
      break;
    }
    if (pid == 0) _exit(RunGuarded(o, rank));
    children.push_back(pid);
  }
  int code = static_cast<int>(children.size()) == o.ranks ? 0 : 1;
  std::vector<bool> reaped(children.size(), false);
  for (size_t left = children.size(); left > 0; --left) {
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) {
      code = 1;
      break;
    }
    size_t i = 0;
    while (i < children.size() && children[i] != pid) ++i;
    if (i == children.size()) continue;
    reaped[i] = true;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "gloo_collective_bench: rank %zu ended with status %d\n", i, status);
      if (code == 0) code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      // One rank failed: the others would wait for it until their timeout.
      for (size_t j = 0; j < children.size(); ++j) {
        if (!reaped[j]) kill(children[j], SIGTERM);
      }
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(o.store_dir, ec);
  return code;
}
