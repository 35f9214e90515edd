// A worker of an elastic collectives job for the system tests, through the
// public C++ API only (tandem::Collectives, tandem::elastic): momentum SGD on
// a gradient that is linear in the weights, a commit after each step, and
// workers that SIGKILL themselves at a chosen step (a worker that joined the
// running job, a replacement, does not: --leave is for the workers that
// started with the job). The test replays the
// steps over each step's members and compares the weights printed here.
//
//   elastic_train [--steps N] [--dim D] [--leave WORKER:STEP]... [--wait-join-at STEP]
//                 [--step-ms MS]
//
// --step-ms MS: sleep MS milliseconds after each step's commit (a job that
// lasts long enough for a test to change its hosts meanwhile).
//
// --wait-join-at STEP: once step STEP is committed while the world has
// fewer workers than the job's places, every member checks for a joining
// worker (tandem::Collectives::CheckJoins) every 20 ms until one is
// admitted (at most 1500 checks, agreed through the checks' broadcasts),
// so that a worker started by the test joins at that step.
//
// Every worker starts from weights of its own; tandem::elastic::Run's first
// Sync makes them worker 0's. Each step begins with a collective barrier:
// a leaving worker dies once it passed the barrier of its step, so every
// member had completed the step before (no step it took part in is left
// under way anywhere). Prints one line per reset and a closing line with
// every weight (%.17g), and exits non-zero with the error when anything
// fails.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tandem/collective.h"
#include "tandem/elastic.h"
#include "tandem/error.h"

namespace {

struct Args {
  int64_t steps = 12;
  int dim = 24;
  std::map<int, int64_t> leave;  // worker -> step
  int64_t wait_join_at = -1;
  int step_ms = 0;
};

Args ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      a.steps = std::atoll(argv[++i]);
    } else if (arg == "--dim" && i + 1 < argc) {
      a.dim = std::atoi(argv[++i]);
    } else if (arg == "--step-ms" && i + 1 < argc) {
      a.step_ms = std::atoi(argv[++i]);
    } else if (arg == "--wait-join-at" && i + 1 < argc) {
      a.wait_join_at = std::atoll(argv[++i]);
    } else if (arg == "--leave" && i + 1 < argc) {
      const std::string spec = argv[++i];
      const size_t colon = spec.find(':');
      if (colon == std::string::npos) {
        std::fprintf(stderr, "elastic_train: --leave wants WORKER:STEP, got '%s'\n", spec.c_str());
        std::exit(2);
      }
      a.leave[std::atoi(spec.substr(0, colon).c_str())] = std::atoll(spec.c_str() + colon + 1);
    } else {
      std::fprintf(stderr, "elastic_train: unknown argument '%s'\n", arg.c_str());
      std::exit(2);
    }
  }
  return a;
}

// The system test's replay computes the same expression.
double Gradient(int worker, int64_t step, int i, double w) {
  return 0.5 * w + static_cast<double>((worker + 1) * static_cast<int>((i + step) % 5)) - 2.0;
}

double LearningRate(int size) { return 0.01 * size; }  // the linear scaling rule

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  try {
    auto collectives = tandem::Collectives::Join();
    const int worker = collectives->cluster().rank();
    const auto n = static_cast<size_t>(args.dim);
    std::vector<double> w(n), v(n, 0.0), g(n);
    for (size_t i = 0; i < n; ++i) {
      w[i] = worker == 0 ? static_cast<double>(i % 7) - 3.0 : 100.0 * (worker + 1);
    }
    auto view = [](std::vector<double>& x) {
      return tandem::TensorView{x.data(), tandem::DType::kF64, {static_cast<int64_t>(x.size())}};
    };
    tandem::elastic::TensorState state;
    state.AddTensor("weights", view(w));
    state.AddTensor("momentum", view(v));
    int64_t& step = state.AddCounter("step");
    double lr = LearningRate(collectives->world().size());
    int resets = 0;
    state.RegisterResetCallback([&] {
      ++resets;
      tandem::Communicator& world = collectives->world();
      lr = LearningRate(world.size());
      std::string members;
      for (int m : world.members()) members += (members.empty() ? "" : ",") + std::to_string(m);
      std::printf("elastic_train: worker %d reset %d rank %d size %d members [%s]\n", worker,
                  resets, world.rank(), world.size(), members.c_str());
      std::fflush(stdout);
    });
    const auto leaving = args.leave.find(worker);
    int places = 0;  // the job's worker places
    for (const auto& node : collectives->cluster().nodes()) {
      places += node.role == tandem::Role::kWorker ? 1 : 0;
    }
    int64_t first_step = -1;  // of this process: 0 unless it joined the running job
    tandem::elastic::Run(*collectives, state, [&] {
      const bool first_entry = first_step < 0;
      if (first_entry) first_step = step;
      // A process that joined the running job says so on its first start.
      std::printf("elastic_train: worker %d trains from step %lld rank %d size %d%s\n", worker,
                  static_cast<long long>(step), collectives->world().rank(),
                  collectives->world().size(),
                  first_entry && collectives->cluster().joined_running_job() ? " (joined)" : "");
      std::fflush(stdout);
      while (step < args.steps) {
        tandem::Communicator& world = collectives->world();
        world.Barrier({"step start", {}});
        if (leaving != args.leave.end() && leaving->second == step && first_step == 0) {
          std::printf("elastic_train: worker %d leaves at step %lld\n", worker,
                      static_cast<long long>(step));
          std::fflush(stdout);
          kill(getpid(), SIGKILL);
        }
        for (size_t i = 0; i < n; ++i) g[i] = Gradient(worker, step, static_cast<int>(i), w[i]);
        tandem::ReduceOptions avg;
        avg.op = tandem::Reduction::kAvg;
        avg.name = "gradient";
        world.AllReduce(view(g), view(g), avg);
        for (size_t i = 0; i < n; ++i) {
          v[i] = 0.9 * v[i] + g[i];
          w[i] -= lr * v[i];
        }
        ++step;
        state.Commit();
        if (args.step_ms > 0) usleep(static_cast<useconds_t>(args.step_ms) * 1000);
        if (step == args.wait_join_at && collectives->world().size() < places) {
          for (int check = 0; check < 1500; ++check) {
            collectives->CheckJoins();  // raises MembershipChanged once one waits
            usleep(20000);
          }
          throw tandem::Timeout("no worker joined within 1500 checks (30 s)");
        }
      }
    });
    std::string weights;
    for (double x : w) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", x);
      weights += (weights.empty() ? "" : " ") + std::string(buf);
    }
    std::printf("elastic_train: worker %d done rank %d size %d step %lld resets %d weights %s\n",
                worker, collectives->world().rank(), collectives->world().size(),
                static_cast<long long>(step), resets, weights.c_str());
    std::fflush(stdout);
    collectives->Finalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_train: %s\n", e.what());
    return tandem::ExitCodeFor(e);
  }
}
