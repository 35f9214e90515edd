// The subcommands of the `tandem` binary, one file each.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tandem::cli {

/// A subcommand's body: runs after parsing and returns the process exit code.
using CommandBody = std::function<int()>;

/// Each Register* adds one subcommand to `app` and sets `*body` to run when
/// that subcommand was chosen.
void RegisterLaunchCommand(CLI::App& app, CommandBody* body);
void RegisterRoleCommands(CLI::App& app, CommandBody* body);
void RegisterK8sCommand(CLI::App& app, CommandBody* body);
void RegisterRemoteExecCommand(CLI::App& app, CommandBody* body);
void RegisterBenchCommand(CLI::App& app, CommandBody* body);
void RegisterRankExecCommand(CLI::App& app, CommandBody* body);
void RegisterTimelineCommand(CLI::App& app, CommandBody* body);
void RegisterSpawnLocalCommand(CLI::App& app, CommandBody* body);

/// The command line with horovodrun's and mpirun's `-np N` (which CLI11
/// would read as `-n p`) spelt `--num-workers N` in `tandem launch`'s own
/// arguments, those before `--`; everything else unchanged. Pure.
std::vector<std::string> SpellLaunchArguments(const std::vector<std::string>& argv);

}  // namespace tandem::cli
