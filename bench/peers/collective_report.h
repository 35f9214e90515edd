// How the collective peer benchmarks (gloo_collective_bench,
// mpi_collective_bench) measure and report, shared so both print exactly
// what tandem's collective_bench prints: nccl-tests' table, or with --json
// one object per size (docs/benchmarks.md, "Collective peers").
//
// Method (/work/shared/BENCHMARKING.md): a correctness pass first (inputs
// rank+1), then warm-up iterations, then timed iterations; every rank times
// every iteration; an iteration's time is the maximum over ranks; the
// reported time is the median of those (and the 90th percentile).
// Bandwidths follow nccl-tests (doc/PERFORMANCE.md there): algbw = bytes /
// time, busbw = algbw x factor, with factor 2(n-1)/n for allreduce, (n-1)/n
// for allgather and reduce_scatter (bytes = the whole gathered or scattered
// buffer), 1 for broadcast. GB/s are 10^9 bytes per second.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::bench {

/// One line of the report.
struct SizeResult {
  std::string impl;   ///< e.g. "gloo_ring", "openmpi_tcp"
  std::string op;     ///< allreduce, broadcast, allgather, reduce_scatter
  std::string redop;  ///< "sum", or "none" for data movement
  int ranks = 0;
  size_t bytes = 0;  ///< the whole buffer, as nccl-tests counts it
  size_t count = 0;  ///< elements of that buffer
  double time_us = 0;
  double time_p90_us = 0;
  double algbw = 0;  ///< GB/s
  double busbw = 0;  ///< GB/s
  uint64_t wrong = 0;
};

/// nccl-tests' bus-bandwidth factor of `op` for `ranks` ranks. Throws
/// std::invalid_argument for an unknown op.
inline double BusBwFactor(const std::string& op, int ranks) {
  const double n = ranks;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter") return (n - 1) / n;
  if (op == "broadcast") return 1.0;
  throw std::invalid_argument("unknown collective '" + op + "'");
}

/// Parses "4096", "4K", "64KiB", "16M", "1G" (binary multiples).
inline size_t ParseBytes(const std::string& text) {
  size_t pos = 0;
  unsigned long long v = std::stoull(text, &pos);
  std::string unit = text.substr(pos);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.empty() || unit == "B") return v;
  if (unit == "K" || unit == "KB" || unit == "KIB") return v << 10;
  if (unit == "M" || unit == "MB" || unit == "MIB") return v << 20;
  if (unit == "G" || unit == "GB" || unit == "GIB") return v << 30;
  throw std::invalid_argument("cannot parse the size '" + text + "'");
}

/// min, min*factor, ... up to max (inclusive), as nccl-tests' -b/-e/-f.
inline std::vector<size_t> Sizes(size_t min_bytes, size_t max_bytes, size_t factor) {
  if (factor < 2) throw std::invalid_argument("the size factor must be at least 2");
  std::vector<size_t> out;
  for (size_t s = min_bytes; s <= max_bytes; s *= factor) out.push_back(s);
  return out;
}

/// Summarises `seconds[rank][iteration]` into a line: per iteration the
/// maximum over ranks, then the median and the 90th percentile.
inline SizeResult Summarize(std::string impl, std::string op, std::string redop, int ranks,
                            size_t bytes, size_t count,
                            const std::vector<std::vector<double>>& seconds, uint64_t wrong) {
  std::vector<double> worst;
  for (size_t it = 0; !seconds.empty() && it < seconds[0].size(); ++it) {
    double m = 0;
    for (const auto& r : seconds) m = std::max(m, r.at(it));
    worst.push_back(m);
  }
  if (worst.empty()) throw std::invalid_argument("no timed iterations");
  std::sort(worst.begin(), worst.end());
  const size_t n = worst.size();
  double median = n % 2 ? worst[n / 2] : (worst[n / 2 - 1] + worst[n / 2]) / 2;
  double p90 = worst[std::min(n - 1, (n * 9 + 9) / 10 - 1)];
  SizeResult r;
  r.impl = std::move(impl);
  r.op = std::move(op);
  r.redop = std::move(redop);
  r.ranks = ranks;
  r.bytes = bytes;
  r.count = count;
  r.time_us = median * 1e6;
  r.time_p90_us = p90 * 1e6;
  r.algbw = median > 0 ? static_cast<double>(bytes) / median / 1e9 : 0;
  r.busbw = r.algbw * BusBwFactor(r.op, ranks);
  r.wrong = wrong;
  return r;
}

/// nccl-tests' table header.
inline void PrintHeader(std::FILE* out, const std::string& impl, const std::string& op, int ranks) {
  std::fprintf(out, "# %s %s, %d ranks; time is the median over iterations of the slowest rank\n",
               impl.c_str(), op.c_str(), ranks);
  std::fprintf(out, "#%12s %12s %8s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
               "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "#%12s %12s %8s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
}

inline void PrintRow(std::FILE* out, const SizeResult& r) {
  std::fprintf(out, " %12zu %12zu %8s %6s %10.1f %8.3f %8.3f %7llu\n", r.bytes, r.count, "float",
               r.redop.c_str(), r.time_us, r.algbw, r.busbw,
               static_cast<unsigned long long>(r.wrong));
}

/// One JSON object on one line (the schema bench/compare_collectives.py reads).
inline void PrintJson(std::FILE* out, const SizeResult& r) {
  std::fprintf(out,
               "{\"impl\":\"%s\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"count\":%zu,"
               "\"dtype\":\"float32\",\"redop\":\"%s\",\"time_us\":%.3f,\"time_p90_us\":%.3f,"
               "\"algbw\":%.9g,\"busbw\":%.9g,\"wrong\":%llu}\n",
               r.impl.c_str(), r.op.c_str(), r.ranks, r.bytes, r.count, r.redop.c_str(), r.time_us,
               r.time_p90_us, r.algbw, r.busbw, static_cast<unsigned long long>(r.wrong));
}

}  // namespace tandem::bench
