// A job's process for the tests of whole-job restarts (`tandem launch
// --max-restarts`, tests/system/test_launch_restart.py): every process says
// who it is and which attempt it belongs to, the workers join the job, and
// one worker fails on the early attempts.
//
//   restart_check [--fail-rank R] [--fail-until K] [--fail-with kill9|exit:N]
//                 [--hold-ms MS]
//
// Run it with --command-runs-all-roles: the scheduler and the servers print
// their line and hand their role to tandem (ServeAssignedRole). Each process
// first prints
//   restart_check: pid=P role=ROLE restart=K max=M port=PORT secret=DIGEST
// (K and M from TANDEM_RESTART_COUNT and TANDEM_MAX_RESTARTS, "unset" when
// missing; PORT the scheduler's port, DIGEST a hash of TANDEM_SECRET, so the
// tests see a fresh identity without the secret itself). The workers join,
// pass a barrier, and then worker R, while TANDEM_RESTART_COUNT < K, fails:
// kill9 sends itself SIGKILL, exit:N exits with status N. Everyone else
// holds MS milliseconds, passes a second barrier, prints
//   restart_check: done rank=I restart=K
// and leaves. A tandem error (the lost worker) exits with tandem's code for
// it (base::ExitCodeFor: 200 for PeerLost).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "base/exit_code.h"
#include "tandem/cluster.h"
#include "tandem/error.h"

namespace {

struct Args {
  int fail_rank = -1;
  int fail_until = 0;
  std::string fail_with = "kill9";
  int hold_ms = 0;
};

[[noreturn]] void Usage(const char* what) {
  std::fprintf(stderr, "restart_check: %s\n", what);
  std::exit(2);
}

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Usage(("missing value after " + arg).c_str());
    if (arg == "--fail-rank") {
      a.fail_rank = std::atoi(argv[++i]);
    } else if (arg == "--fail-until") {
      a.fail_until = std::atoi(argv[++i]);
    } else if (arg == "--fail-with") {
      a.fail_with = argv[++i];
      if (a.fail_with != "kill9" && a.fail_with.rfind("exit:", 0) != 0) {
        Usage(("--fail-with is kill9 or exit:N, not " + a.fail_with).c_str());
      }
    } else if (arg == "--hold-ms") {
      a.hold_ms = std::atoi(argv[++i]);
    } else {
      Usage(("unknown argument " + arg).c_str());
    }
  }
  return a;
}

std::string Variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "unset";
}

unsigned long Digest(const std::string& text) {
  unsigned long h = 1469598103934665603ul;
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ul;
  return h;
}

[[noreturn]] void Fail(const std::string& how) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (how == "kill9") {
    ::kill(::getpid(), SIGKILL);
    ::pause();
  }
  std::_Exit(std::atoi(how.c_str() + std::strlen("exit:")));
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  const std::string restart = Variable("TANDEM_RESTART_COUNT");
  std::printf("restart_check: pid=%d role=%s restart=%s max=%s port=%s secret=%lx\n", ::getpid(),
              Variable("DMLC_ROLE").c_str(), restart.c_str(),
              Variable("TANDEM_MAX_RESTARTS").c_str(), Variable("DMLC_PS_ROOT_PORT").c_str(),
              Digest(Variable("TANDEM_SECRET")));
  std::fflush(stdout);
  if (auto code = tandem::ServeAssignedRole()) return *code;
  try {
    auto cluster = tandem::Cluster::Join();
    cluster->Barrier(tandem::group::kWorkers);
    const int rank = cluster->rank();
    if (rank == args.fail_rank && std::atoi(restart.c_str()) < args.fail_until) {
      std::printf("restart_check: worker %d fails (%s) on restart %s\n", rank,
                  args.fail_with.c_str(), restart.c_str());
      Fail(args.fail_with);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(args.hold_ms));
    cluster->Barrier(tandem::group::kWorkers);
    cluster->Finalize();
    std::printf("restart_check: done rank=%d restart=%s\n", rank, restart.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "restart_check (pid %d): error: %s\n", ::getpid(), e.what());
    return tandem::base::ExitCodeFor(e);
  }
}
