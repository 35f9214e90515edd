// Parameter-server benchmark (docs/benchmarks.md, "Parameter server").
//
// Run without --worker it is the driver: for each job shape it starts
// `tandem launch -n W -s S -- kv_bench --worker ...` (tandem's own servers,
// loopback), collects the workers' lines and prints the tables. With
// --worker it is one worker of such a job.
//
// Method (/work/shared/BENCHMARKING.md): every size first runs a
// correctness round (worker w pushes w+1, the pull must be W(W+1)/2), then
// warm-up, then timed iterations; each iteration starts after a worker
// barrier; its time is the maximum over the workers (each worker reports
// every iteration, the driver takes the maximum per iteration); the table
// shows the median and the p90 over iterations. GB/s is payload bytes of
// one worker's call divided by that time (per worker), so W workers move W
// times that in total.
//
//   push:      Push(key), blocking (the dist_sync round of all workers)
//   pull:      Pull(key), blocking
//   push-pull: PushPull(key), blocking
//
// The ps-lite shape: 1 server, 2 workers, one 120 MB key, push then pull.
// The server's cores: 1 server, 2 workers, 8 keys of 16 MiB pushed
// asynchronously with Adam on the server, then waited for; the driver reads
// the server's threads' CPU time (/proc) over the timed iterations.
//
// Usage: kv_bench [--quick] [--shapes W:S,...] [--sizes BYTES,...]
#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/kvstore.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int Iterations(size_t bytes, bool quick) {
  int n = bytes <= (64u << 10) ? 200 : bytes <= (4u << 20) ? 40 : bytes <= (32u << 20) ? 12 : 6;
  return quick ? std::max(3, n / 4) : n;
}

// One worker: prints "kvb <op> <bytes> <iteration> <seconds>" per timed
// iteration.
int Worker(const std::vector<size_t>& sizes, bool quick, const std::string& mode) {
  auto kv = tandem::KVStore::Create("dist_sync");
  const int rank = kv->Rank();
  const int workers = kv->NumWorkers();
  int key = 0;
  if (mode == "pslite") {
    // 120 MB as ps-lite's benchmark: one push then one pull per round.
    const size_t n = 30000000;
    std::vector<float> v(n, float(rank + 1)), out(n);
    tandem::TensorView tv{v.data(), tandem::DType::kF32, {int64_t(n)}};
    tandem::TensorView to{out.data(), tandem::DType::kF32, {int64_t(n)}};
    kv->Init(key, tv);
    for (int it = 0; it < (quick ? 3 : 6); ++it) {
      kv->Barrier();
      auto t0 = Clock::now();
      kv->Push(key, tv);
      auto t1 = Clock::now();
      kv->Pull(key, to);
      auto t2 = Clock::now();
      if (out[0] != float(workers * (workers + 1) / 2)) throw tandem::Error("wrong 120 MB sum");
      if (it == 0) continue;  // warm-up
      std::printf("kvb push %zu %d %.9f\n", n * 4, it,
                  std::chrono::duration<double>(t1 - t0).count());
      std::printf("kvb pull %zu %d %.9f\n", n * 4, it,
                  std::chrono::duration<double>(t2 - t1).count());
    }
    std::fflush(stdout);
    return 0;
  }
  if (mode == "cores") {
    // Many keys at once, with Adam on the servers: the server's shards
    // update different keys in parallel.
    const int keys = 8;
    const size_t n = (16u << 20) / 4;
    std::vector<std::vector<float>> vals(keys, std::vector<float>(n, float(rank + 1)));
    for (int k = 0; k < keys; ++k) kv->Init(k, {vals[k].data(), tandem::DType::kF32, {int64_t(n)}});
    kv->SetOptimizer("adam", {{"learning_rate", "0.001"}});
    kv->Barrier();
    if (rank == 0) {
      std::printf("kvb-phase begin\n");
      std::fflush(stdout);
    }
    for (int it = 0; it < (quick ? 3 : 8); ++it) {
      kv->Barrier();
      auto t0 = Clock::now();
      std::vector<tandem::KVHandle> hs;
      for (int k = 0; k < keys; ++k) {
        hs.push_back(kv->PushAsync(k, {{vals[k].data(), tandem::DType::kF32, {int64_t(n)}}}));
      }
      for (auto& h : hs) h.Wait();
      auto t1 = Clock::now();
      std::printf("kvb manykeys %zu %d %.9f\n", n * 4 * keys, it,
                  std::chrono::duration<double>(t1 - t0).count());
    }
    kv->Barrier();
    if (rank == 0) std::printf("kvb-phase end\n");
    std::fflush(stdout);
    return 0;
  }
  for (size_t bytes : sizes) {
    const size_t n = bytes / 4;
    std::vector<float> v(n, float(rank + 1)), out(n);
    tandem::TensorView tv{v.data(), tandem::DType::kF32, {int64_t(n)}};
    tandem::TensorView to{out.data(), tandem::DType::kF32, {int64_t(n)}};
    kv->Init(key, tv);
    // Correctness first.
    kv->Push(key, tv);
    kv->Pull(key, to);
    const float want = float(workers * (workers + 1) / 2);
    for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 97)) {
      if (out[i] != want) {
        throw tandem::Error(
            fmt::format("key of {} bytes: element {} is {}, expected {}", bytes, i, out[i], want));
      }
    }
    const int iters = Iterations(bytes, quick);
    for (const char* op : {"push", "pull", "pushpull"}) {
      for (int it = -2; it < iters; ++it) {
        kv->Barrier();
        auto t0 = Clock::now();
        if (std::strcmp(op, "push") == 0) {
          kv->Push(key, tv);
        } else if (std::strcmp(op, "pull") == 0) {
          kv->Pull(key, to);
        } else {
          kv->PushPull(key, tv, to);
        }
        double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (it >= 0) std::printf("kvb %s %zu %d %.9f\n", op, bytes, it, s);
      }
    }
    std::fflush(stdout);
    ++key;
  }
  return 0;
}

struct Job {
  std::string output;
  int code = 0;
};

// CPU seconds per thread of a process, by thread name (/proc/<pid>/task).
std::map<std::string, double> ThreadCpu(int pid) {
  std::map<std::string, double> out;
  const double tick = double(sysconf(_SC_CLK_TCK));
  std::string dir = fmt::format("/proc/{}/task", pid);
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), closedir);
  if (!d) return out;
  while (dirent* e = readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::string name = stat.substr(open + 1, close - open - 1);
    std::stringstream rest(stat.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    out[name + " (" + e->d_name + ")"] = (utime + stime) / tick;
  }
  return out;
}

// The pid of the job's server: the `tandem server` process whose
// environment carries `tag`.
int FindServer(const std::string& tag) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir("/proc"), closedir);
  while (d && (errno = 0, true)) {
    dirent* e = readdir(d.get());
    if (!e) break;
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream cmd(fmt::format("/proc/{}/cmdline", e->d_name));
    std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    if (cmdline.find(std::string("server") + '\0') == std::string::npos &&
        !cmdline.ends_with("server")) {
      continue;
    }
    std::ifstream env(fmt::format("/proc/{}/environ", e->d_name));
    std::string environ((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    if (environ.find("TANDEM_BENCH_TAG=" + tag) != std::string::npos) return std::atoi(e->d_name);
  }
  return -1;
}

struct ServerWindow {
  double wall = 0;
  std::map<std::string, double> cpu;  // per thread, over the window
};

// Runs a job; with `window`, samples the server's threads between the
// "kvb-phase begin" and "kvb-phase end" lines of worker 0.
Job RunJob(const std::string& tandem, const std::string& self, int workers, int servers,
           const std::string& args, ServerWindow* window = nullptr) {
  const std::string tag = fmt::format("{}-{}", getpid(), workers * 10 + servers);
  std::string cmd = fmt::format("TANDEM_BENCH_TAG={} {} launch -n {} -s {} -- {} --worker {} 2>&1",
                                tag, tandem, workers, servers, self, args);
  Job job;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw tandem::IoError("popen " + cmd);
  char buf[4096];
  int server = -1;
  std::map<std::string, double> before;
  Clock::time_point t0;
  while (fgets(buf, sizeof buf, p)) {
    job.output += buf;
    if (!window) continue;
    if (std::strstr(buf, "kvb-phase begin")) {
      server = FindServer(tag);
      before = ThreadCpu(server);
      t0 = Clock::now();
    } else if (std::strstr(buf, "kvb-phase end") && server > 0) {
      window->wall = std::chrono::duration<double>(Clock::now() - t0).count();
      for (auto& [name, cpu] : ThreadCpu(server)) window->cpu[name] = cpu - before[name];
    }
  }
  job.code = pclose(p);
  return job;
}

// time[op][bytes][iteration] = max over workers.
using Times = std::map<std::string, std::map<size_t, std::map<int, double>>>;

Times Parse(const std::string& output) {
  Times t;
  std::stringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    auto pos = line.find("kvb ");
    if (pos == std::string::npos) continue;
    std::stringstream fields(line.substr(pos + 4));
    std::string op;
    size_t bytes;
    int it;
    double s;
    if (fields >> op >> bytes >> it >> s) {
      double& slot = t[op][bytes][it];
      slot = std::max(slot, s);
    }
  }
  return t;
}

std::pair<double, double> MedianP90(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)]};
}

std::string SizeName(size_t b) {
  if (b >= (1u << 20)) return fmt::format("{} MiB", b >> 20);
  if (b >= 1024) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

std::string ServerCpu(const std::string& output) {
  std::string out;
  std::stringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    auto pos = line.find("cpu time");
    if (pos != std::string::npos) out += "    " + line + "\n";
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  bool worker = false;
  std::string mode = "sizes";
  std::string shapes = "1:1,2:1,4:1,1:2,2:2,4:2";
  std::string sizes_arg = "4096,1048576,16777216,67108864";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--worker") {
      worker = true;
    } else if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--shapes" && i + 1 < argc) {
      shapes = argv[++i];
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes_arg = argv[++i];
    } else {
      std::fprintf(stderr, "kv_bench: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  std::vector<size_t> sizes;
  for (auto& s : Split(sizes_arg, ',')) sizes.push_back(std::stoull(s));
  try {
    if (worker) return Worker(sizes, quick, mode);
    std::string self = argv[0];
    if (self.find('/') == std::string::npos) {
      std::fprintf(stderr, "kv_bench: run it by path (it finds tandem next to itself)\n");
      return 2;
    }
    std::string dir = self.substr(0, self.rfind('/'));
    std::string tandem = dir + "/tandem";
    std::string common = fmt::format("{}--sizes {}", quick ? "--quick " : "", sizes_arg);

    std::printf("## dist_sync push / pull / push-pull, loopback (median, p90 over iterations)\n\n");
    std::printf(
        "| workers | servers | size | push GB/s | push ms (p90) | pull GB/s | pull ms (p90) | "
        "push-pull GB/s | push-pull ms (p90) |\n|---|---|---|---|---|---|---|---|---|\n");
    for (auto& shape : Split(shapes, ',')) {
      auto ws = Split(shape, ':');
      int w = std::stoi(ws.at(0)), s = std::stoi(ws.at(1));
      Job job = RunJob(tandem, self, w, s, common);
      if (job.code != 0) {
        std::fprintf(stderr, "job %d workers %d servers failed:\n%s\n", w, s, job.output.c_str());
        return 1;
      }
      Times t = Parse(job.output);
      for (size_t bytes : sizes) {
        std::string row = fmt::format("| {} | {} | {} |", w, s, SizeName(bytes));
        for (const char* op : {"push", "pull", "pushpull"}) {
          std::vector<double> v;
          for (auto& [it, sec] : t[op][bytes]) v.push_back(sec);
          if (v.empty()) {
            row += " - | - |";
            continue;
          }
          auto [med, p90] = MedianP90(v);
          row += fmt::format(" {:.3f} | {:.3f} ({:.3f}) |", double(bytes) / med / 1e9, med * 1e3,
                             p90 * 1e3);
        }
        std::printf("%s\n", row.c_str());
        std::fflush(stdout);
      }
    }

    std::printf("\n## ps-lite's shape: 1 server, 2 workers, 120 MB push then pull per worker\n\n");
    Job ps = RunJob(tandem, self, 2, 1, fmt::format("{}--mode pslite", quick ? "--quick " : ""));
    if (ps.code != 0) {
      std::fprintf(stderr, "ps-lite shape failed:\n%s\n", ps.output.c_str());
      return 1;
    }
    Times pt = Parse(ps.output);
    std::printf("| op | GB/s per worker (median) | ms (median, p90) |\n|---|---|---|\n");
    for (const char* op : {"push", "pull"}) {
      std::vector<double> v;
      size_t bytes = 0;
      for (auto& [b, its] : pt[op]) {
        bytes = b;
        for (auto& [it, sec] : its) v.push_back(sec);
      }
      auto [med, p90] = MedianP90(v);
      std::printf("| %s | %.3f | %.1f (%.1f) |\n", op, double(bytes) / med / 1e9, med * 1e3,
                  p90 * 1e3);
    }

    std::printf(
        "\n## one server's cores: 2 workers push 8 keys of 16 MiB at once, Adam on the server\n\n");
    ServerWindow window;
    Job cores =
        RunJob(tandem, self, 2, 1, fmt::format("{}--mode cores", quick ? "--quick " : ""), &window);
    if (cores.code != 0) {
      std::fprintf(stderr, "cores run failed:\n%s\n", cores.output.c_str());
      return 1;
    }
    Times ct = Parse(cores.output);
    std::vector<double> v;
    size_t bytes = 0;
    for (auto& [b, its] : ct["manykeys"]) {
      bytes = b;
      for (auto& [it, sec] : its) v.push_back(sec);
    }
    auto [med, p90] = MedianP90(v);
    std::printf("push of %s per worker: %.3f GB/s per worker, %.1f ms (p90 %.1f)\n",
                SizeName(bytes).c_str(), double(bytes) / med / 1e9, med * 1e3, p90 * 1e3);
    double total = 0;
    std::printf("\nthe server's threads during the timed iterations (%.2f s of wall time):\n\n",
                window.wall);
    std::printf("| thread | CPU s | cores |\n|---|---|---|\n");
    for (auto& [name, cpu] : window.cpu) {
      if (cpu <= 0) continue;
      total += cpu;
      std::printf("| %s | %.2f | %.2f |\n", name.c_str(), cpu,
                  window.wall > 0 ? cpu / window.wall : 0);
    }
    std::printf("| all | %.2f | %.2f |\n", total, window.wall > 0 ? total / window.wall : 0);
    std::printf("\nserver's own account over its whole life:\n%s", ServerCpu(cores.output).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kv_bench: error: %s\n", e.what());
    return 1;
  }
}
