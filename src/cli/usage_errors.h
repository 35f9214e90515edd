// Command-line mistakes reported as usage errors: one line, exit code 2, and
// for a misspelt subcommand or flag the closest valid one (docs/deploy.md,
// "Exit codes").
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {

/// The name in `candidates` closest to `word` by edit distance (insertions,
/// deletions, substitutions and swaps of neighbours), when it is close
/// enough to be a slip: at most 1 edit for words up to 4 characters, 2 up to
/// 8, 3 beyond. Ties go to the first candidate. Pure.
std::optional<std::string> ClosestName(const std::string& word,
                                       const std::vector<std::string>& candidates);

/// The one line to print for a parse error of `app` on `argv` (without the
/// "tandem: usage error: " prefix): CLI11's message, with "did you mean
/// ...?" for an unknown subcommand or flag, and a hint to put the program
/// after '--' when `tandem launch` met words it does not know. Pure apart
/// from reading `app`.
std::string DescribeUsageError(const CLI::App& app, const CLI::ParseError& error,
                               const std::vector<std::string>& argv);

/// Throws CLI::ExtrasError naming an unknown subcommand (and the closest
/// one) when argv[1] is a word that is no subcommand of `app`; CLI11 would
/// only say that a subcommand is required. Pure apart from reading `app`.
void CheckSubcommand(const CLI::App& app, const std::vector<std::string>& argv);

}  // namespace tandem::cli
