// A job's process for the system tests and the foundation's main job: joins
// the cluster in whatever role the environment gives it, runs barriers over
// every group it belongs to, checks what it learned, and leaves.
//
//   cluster_check [--barriers N] [--sleep-ms MS] [--serve-roles]
//
// With --serve-roles the barriers span the workers only, and a scheduler or
// server started with this program hands its role to tandem
// (tandem::ServeAssignedRole); use it when the job's scheduler and servers are
// tandem's built-in ones or should behave as such. Prints one summary line that the tests
// parse, and exits non-zero with the error when anything fails.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tandem/cluster.h"
#include "tandem/error.h"

namespace {

struct Args {
  int barriers = 100;
  int sleep_ms = 0;
  bool serve_roles = false;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--barriers" && i + 1 < argc) {
      a.barriers = std::atoi(argv[++i]);
    } else if (arg == "--sleep-ms" && i + 1 < argc) {
      a.sleep_ms = std::atoi(argv[++i]);
    } else if (arg == "--serve-roles") {
      a.serve_roles = true;
    } else {
      std::fprintf(stderr, "cluster_check: unknown argument '%s'\n", arg.c_str());
      std::exit(2);
    }
  }
  return a;
}

bool InGroups(tandem::Role role, int groups) {
  switch (role) {
    case tandem::Role::kScheduler:
      return (groups & tandem::group::kScheduler) != 0;
    case tandem::Role::kServer:
      return (groups & tandem::group::kServers) != 0;
    case tandem::Role::kWorker:
      return (groups & tandem::group::kWorkers) != 0;
  }
  return false;
}

// A digest of the node table: every process must print the same one.
unsigned long TableDigest(const std::vector<tandem::NodeInfo>& nodes) {
  unsigned long h = 1469598103934665603ul;
  for (const auto& n : nodes) {
    std::string s = n.ToString();
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ul;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = ParseArgs(argc, argv);
  std::printf("cluster_check: pid=%d role=%s\n", getpid(), std::getenv("DMLC_ROLE"));
  std::fflush(stdout);
  if (args.serve_roles) {
    if (auto code = tandem::ServeAssignedRole()) return *code;
  }
  try {
    auto cluster = tandem::Cluster::Join();
    using tandem::group::kScheduler;
    using tandem::group::kServers;
    using tandem::group::kWorkers;
    const int masks[] = {tandem::group::kAll,   kWorkers, kServers | kWorkers,
                         kScheduler | kWorkers, kServers, kScheduler | kServers};
    int passed = 0;
    for (int i = 0; i < args.barriers; ++i) {
      int mask = args.serve_roles ? kWorkers : masks[i % 6];
      if (!InGroups(cluster->role(), mask)) continue;
      cluster->Barrier(mask);
      ++passed;
      if (args.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args.sleep_ms));
    }
    int rank = cluster->rank();
    std::string role(tandem::RoleName(cluster->role()));
    int workers = cluster->num_workers();
    int servers = cluster->num_servers();
    unsigned long digest = TableDigest(cluster->nodes());
    cluster->Finalize();
    std::printf("cluster_check: done role=%s rank=%d workers=%d servers=%d barriers=%d table=%lx\n",
                role.c_str(), rank, workers, servers, passed, digest);
    return 0;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "cluster_check (pid %d): error: %s\n", getpid(), e.what());
    return 1;
  }
}
