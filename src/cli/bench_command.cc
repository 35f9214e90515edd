// `tandem bench`: the collective benchmark as a subcommand, a thin layer over
// `tandem launch --no-scheduler -- collective_bench` (bench/collective_bench.cc
// measures; docs/benchmarks.md describes the table).
//
//   tandem bench allreduce|broadcast|allgather|reduce_scatter -n RANKS
//                [--min-bytes B] [--max-bytes B] [--factor F] [--iters N]
//                [--warmup N] [--algorithm A] [--json] [--env K=V]...
//                [--bench-binary PATH]
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/environment.h"
#include "cli/commands.h"
#include "launch/local_launcher.h"
#include "launch/process_supervisor.h"
#include "tandem/error.h"

namespace tandem::cli {
namespace {

struct BenchArguments {
  std::string op;
  int ranks = 0;
  std::string min_bytes = "4096";
  std::string max_bytes = "268435456";
  std::string factor = "4";
  std::string iters;
  std::string warmup;
  std::string algorithm;
  bool json = false;
  std::vector<std::string> env;
  std::string bench_binary;
};

int RunBench(const BenchArguments& args) {
  std::string binary = args.bench_binary;
  if (binary.empty()) {
    binary =
        (std::filesystem::path(launch::CurrentExecutablePath()).parent_path() / "collective_bench")
            .string();
  }
  if (!std::filesystem::exists(binary)) {
    throw ConfigError(fmt::format(
        "tandem bench runs {} (built from bench/collective_bench.cc next to tandem), which does "
        "not exist; build it or name it with --bench-binary",
        binary));
  }
  launch::LocalJobOptions options;
  options.num_workers = args.ranks;
  options.num_servers = 0;
  options.rendezvous_in_worker = true;
  options.command = {binary,        "--op",         args.op,    "--min-bytes", args.min_bytes,
                     "--max-bytes", args.max_bytes, "--factor", args.factor};
  if (!args.iters.empty()) options.command.insert(options.command.end(), {"--iters", args.iters});
  if (!args.warmup.empty()) {
    options.command.insert(options.command.end(), {"--warmup", args.warmup});
  }
  if (!args.algorithm.empty()) {
    options.command.insert(options.command.end(), {"--algorithm", args.algorithm});
  }
  if (args.json) options.command.push_back("--json");
  for (const auto& assignment : args.env) {
    options.env.push_back(launch::ParseEnvAssignment(assignment));
  }
  return launch::RunLocalJob(options, launch::SupervisorOptions{},
                             base::Environment::FromProcess());
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, CommandBody* body) {
  auto args = std::make_shared<BenchArguments>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Measure a collective on this host: RANKS processes over loopback TCP, a table in "
      "nccl-tests' form (size, count, type, redop, time, algbw, busbw, #wrong)");
  cmd->footer(
      "Runs `tandem launch -n RANKS --no-scheduler -- collective_bench --op OP ...`.\n"
      "  tandem bench allreduce -n 4 --min-bytes 4096 --max-bytes 67108864\n"
      "See docs/benchmarks.md for the method and bench/compare_collectives.py for peers.");
  cmd->add_option("op", args->op, "allreduce, broadcast, allgather or reduce_scatter")
      ->required()
      ->check(CLI::IsMember({"allreduce", "broadcast", "allgather", "reduce_scatter"}));
  cmd->add_option("-n,--ranks", args->ranks, "Number of ranks (processes)")
      ->required()
      ->check(CLI::Range(1, 1 << 12));
  cmd->add_option("--min-bytes", args->min_bytes, "Smallest size in bytes")->capture_default_str();
  cmd->add_option("--max-bytes", args->max_bytes, "Largest size in bytes")->capture_default_str();
  cmd->add_option("--factor", args->factor, "Size step factor")->capture_default_str();
  cmd->add_option("--iters", args->iters, "Timed iterations per size (default: by size)");
  cmd->add_option("--warmup", args->warmup, "Untimed iterations per size");
  cmd->add_option("--algorithm", args->algorithm,
                  "allreduce only: ring, halving_doubling, direct (default: the table's choice)")
      ->check(CLI::IsMember({"auto", "ring", "halving_doubling", "direct"}));
  cmd->add_flag("--json", args->json, "One JSON object per size instead of the table");
  cmd->add_option("--env", args->env, "Set NAME=VALUE in every rank (repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME=VALUE");
  cmd->add_option("--bench-binary", args->bench_binary,
                  "The collective_bench program (default: next to this tandem binary)");
  cmd->callback([body, args] { *body = [args] { return RunBench(*args); }; });
}

}  // namespace tandem::cli
