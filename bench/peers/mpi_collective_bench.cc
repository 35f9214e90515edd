// MPI's collectives, measured the way tandem's collective_bench measures its
// own (bench/peers/collective_report.h), so bench/compare_collectives.py can
// put them side by side. Run under mpirun, e.g. OpenMPI over TCP on loopback:
//
//   mpirun --allow-run-as-root -n 4 --bind-to none --mca btl self,tcp \
//     --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
//     --mca mpi_yield_when_idle 1 \
//     mpi_collective_bench --op allreduce --impl openmpi_tcp [--min-bytes 4K]
//     [--max-bytes 64M] [--factor 2] [--iters 20] [--warmup 5] [--json]
//
// Ops: allreduce (MPI_Allreduce, sum), broadcast (MPI_Bcast from rank 0),
// allgather (MPI_Allgather), reduce_scatter (MPI_Reduce_scatter_block, sum).
// Sizes are the whole buffer as nccl-tests counts them: the gathered output
// of allgather, the scattered input of reduce_scatter. Inputs are rank+1, so
// every result is known in closed form and checked before timing.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collective_report.h"

namespace {

using tandem::bench::ParseBytes;

struct Options {
  std::string op = "allreduce";
  std::string impl = "mpi";
  size_t min_bytes = 4096;
  size_t max_bytes = 64u << 20;
  size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  bool json = false;
};

bool Parse(int argc, char** argv, Options& o, std::string& error) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (i + 1 >= argc) {
      error = "missing value after " + a;
      return false;
    }
    std::string v = argv[++i];
    if (a == "--op")
      o.op = v;
    else if (a == "--impl")
      o.impl = v;
    else if (a == "--min-bytes")
      o.min_bytes = ParseBytes(v);
    else if (a == "--max-bytes")
      o.max_bytes = ParseBytes(v);
    else if (a == "--factor")
      o.factor = std::stoul(v);
    else if (a == "--iters")
      o.iters = std::stoi(v);
    else if (a == "--warmup")
      o.warmup = std::stoi(v);
    else {
      error = "unknown argument " + a;
      return false;
    }
  }
  if (o.op != "allreduce" && o.op != "broadcast" && o.op != "allgather" &&
      o.op != "reduce_scatter") {
    error = "unknown op " + o.op + " (allreduce, broadcast, allgather, reduce_scatter)";
    return false;
  }
  if (o.iters < 1 || o.warmup < 0) {
    error = "iters must be >= 1 and warmup >= 0";
    return false;
  }
  return true;
}

// Buffers and one call of `op` for a whole-buffer size of `bytes`.
class Collective {
 public:
  Collective(const std::string& op, size_t bytes, int rank, int ranks)
      : op_(op), rank_(rank), ranks_(ranks) {
    const size_t count = bytes / sizeof(float);
    // allgather/reduce_scatter: each rank's share is count / ranks elements.
    share_ = count / static_cast<size_t>(ranks);
    if (op_ == "allgather") {
      send_.resize(share_);
      recv_.resize(share_ * ranks);
    } else if (op_ == "reduce_scatter") {
      send_.resize(share_ * ranks);
      recv_.resize(share_);
    } else {
      send_.resize(count);  // in place
    }
  }

  // The elements the buffer holds, as reported in the table.
  size_t count() const {
    if (op_ == "allgather") return recv_.size();
    return send_.size();
  }

  void Fill() {
    std::fill(send_.begin(), send_.end(), static_cast<float>(rank_ + 1));
    std::fill(recv_.begin(), recv_.end(), -1.0f);
    if (op_ == "broadcast" && rank_ != 0) std::fill(send_.begin(), send_.end(), 0.0f);
  }

  void Run() {
    const int n = static_cast<int>(send_.size());
    if (op_ == "allreduce") {
      MPI_Allreduce(MPI_IN_PLACE, send_.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (op_ == "broadcast") {
      MPI_Bcast(send_.data(), n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    } else if (op_ == "allgather") {
      MPI_Allgather(send_.data(), static_cast<int>(share_), MPI_FLOAT, recv_.data(),
                    static_cast<int>(share_), MPI_FLOAT, MPI_COMM_WORLD);
    } else {
      MPI_Reduce_scatter_block(send_.data(), recv_.data(), static_cast<int>(share_), MPI_FLOAT,
                               MPI_SUM, MPI_COMM_WORLD);
    }
  }

  // Elements that differ from the closed form after Fill() + Run().
  uint64_t Wrong() const {
    const float sum = static_cast<float>(ranks_) * static_cast<float>(ranks_ + 1) / 2;
    uint64_t wrong = 0;
    if (op_ == "allreduce") {
      for (float v : send_) wrong += v != sum;
    } else if (op_ == "broadcast") {
      for (float v : send_) wrong += v != 1.0f;  // rank 0's rank+1
    } else if (op_ == "allgather") {
      for (size_t i = 0; i < recv_.size(); ++i) {
        wrong += recv_[i] != static_cast<float>(i / share_ + 1);
      }
    } else {
      for (float v : recv_) wrong += v != sum;
    }
    return wrong;
  }

 private:
  std::string op_;
  int rank_, ranks_;
  size_t share_ = 0;
  std::vector<float> send_, recv_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Options o;
  std::string error;
  bool ok = false;
  try {
    ok = Parse(argc, argv, o, error);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!ok) {
    if (rank == 0) std::fprintf(stderr, "mpi_collective_bench: %s\n", error.c_str());
    MPI_Finalize();
    return 2;
  }
  const std::string redop = o.op == "allreduce" || o.op == "reduce_scatter" ? "sum" : "none";
  if (rank == 0 && !o.json) tandem::bench::PrintHeader(stdout, o.impl, o.op, ranks);
  uint64_t total_wrong = 0;
  for (size_t bytes : tandem::bench::Sizes(o.min_bytes, o.max_bytes, o.factor)) {
    Collective c(o.op, bytes, rank, ranks);
    c.Fill();
    MPI_Barrier(MPI_COMM_WORLD);
    c.Run();
    unsigned long long wrong = c.Wrong(), wrong_all = 0;
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    for (int i = 0; i < o.warmup; ++i) c.Run();
    std::vector<double> mine(o.iters);
    for (int i = 0; i < o.iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      c.Run();
      mine[i] = MPI_Wtime() - t0;
    }
    // The per-iteration times of every rank, for the max over ranks.
    std::vector<double> all(rank == 0 ? static_cast<size_t>(o.iters) * ranks : 0);
    MPI_Gather(mine.data(), o.iters, MPI_DOUBLE, all.data(), o.iters, MPI_DOUBLE, 0,
               MPI_COMM_WORLD);
    if (rank != 0) continue;
    std::vector<std::vector<double>> seconds(ranks);
    for (int q = 0; q < ranks; ++q) {
      seconds[q].assign(all.begin() + static_cast<long>(q) * o.iters,
                        all.begin() + static_cast<long>(q + 1) * o.iters);
    }
    auto res = tandem::bench::Summarize(o.impl, o.op, redop, ranks, c.count() * sizeof(float),
                                        c.count(), seconds, wrong_all);
    total_wrong += res.wrong;
    if (o.json) {
      tandem::bench::PrintJson(stdout, res);
    } else {
      tandem::bench::PrintRow(stdout, res);
    }
    std::fflush(stdout);
  }
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 3;
}
