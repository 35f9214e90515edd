// `tandem bench NAME [ARGS...]`: one entry point for tandem's benchmarks.
//
// The benchmarks are programs of their own (bench/<name>.cc, installed next
// to the tandem binary in a build's bin/); this subcommand finds the one a
// name stands for and replaces itself with it, so that its output, exit code
// and signals are the benchmark's. The collective operations run their
// benchmark as a collectives-only job of `-n` ranks on this machine, through
// `tandem launch --launcher local --no-scheduler`. docs/benchmarks.md lists
// each benchmark's options.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/exit_code.h"
#include "cli/commands.h"
#include "launch/local_launcher.h"
#include "tandem/error.h"

namespace tandem::cli {
namespace {

struct BenchArguments {
  std::string name;
  int ranks = 4;
};

bool IsCollective(const std::string& name) {
  return name == "allreduce" || name == "broadcast" || name == "allgather" ||
         name == "reduce_scatter";
}

// Replaces this process with `argv`; returns only on failure, with the exit
// code for it after saying why on stderr.
int Exec(const std::vector<std::string>& argv) {
  std::vector<char*> raw;
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  ::execv(raw[0], raw.data());
  std::fprintf(stderr, "tandem bench: cannot run %s: %s\n", raw[0], std::strerror(errno));
  return errno == ENOENT ? base::kExitNotFound : base::kExitCannotExecute;
}

int RunBench(const BenchArguments& args, const std::vector<std::string>& rest) {
  const std::filesystem::path self = launch::CurrentExecutablePath();
  const std::filesystem::path dir = self.parent_path();
  std::string program;
  if (args.name == "transport" || args.name == "kv" || args.name == "optimizer") {
    program = args.name + "_bench";
  } else if (IsCollective(args.name)) {
    program = "collective_bench";
  } else {
    throw ConfigError(fmt::format(
        "tandem bench: unknown benchmark '{}' (expected transport, kv, optimizer, allreduce, "
        "broadcast, allgather or reduce_scatter)",
        args.name));
  }
  const std::filesystem::path exe = dir / program;
  if (::access(exe.c_str(), X_OK) != 0) {
    throw ConfigError(
        fmt::format("tandem bench {}: {} is not there or not executable (benchmarks are built with "
                    "-DTANDEM_BUILD_BENCH=ON, the default, and live next to the tandem binary)",
                    args.name, exe.string()));
  }
  std::vector<std::string> argv;
  if (IsCollective(args.name)) {
    argv = {self.string(),    "launch", "--launcher", "local", "-n",     std::to_string(args.ranks),
            "--no-scheduler", "--",     exe.string(), "--op",  args.name};
  } else {
    argv = {exe.string()};
  }
  argv.insert(argv.end(), rest.begin(), rest.end());
  return Exec(argv);
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, CommandBody* body) {
  auto args = std::make_shared<BenchArguments>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Run one of tandem's benchmarks: transport, kv, optimizer, or a collective (allreduce, "
      "broadcast, allgather, reduce_scatter) over -n local ranks; the arguments after NAME go "
      "to the benchmark");
  cmd->footer(
      "Examples:\n"
      "  tandem bench transport\n"
      "  tandem bench kv --json\n"
      "  tandem bench allreduce -n 4 --max-bytes 67108864\n"
      "See docs/benchmarks.md for each benchmark's options and tables.");
  cmd->add_option("name", args->name, "The benchmark")->required();
  cmd->add_option("-n,--ranks", args->ranks, "Ranks of a collective benchmark (default 4)")
      ->check(CLI::Range(1, 256));
  cmd->prefix_command();  // everything after NAME (and -n) is the benchmark's
  cmd->callback([cmd, args, body] {
    std::vector<std::string> rest = cmd->remaining();
    *body = [args, rest] { return RunBench(*args, rest); };
  });
}

}  // namespace tandem::cli
