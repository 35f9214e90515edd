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
/// deletions, substitutions and swaps of neighbours, leading dashes not
/// counted: "--n" is 0 edits from "-n"), when it is close enough to be a
/// slip: at most 1 edit for words up to 4 characters, 2 up to 8, 3 beyond,
/// and fewer edits than the word has characters ("-x" is no slip of "-n").
/// Ties go to the first candidate; nothing when none is close. Pure.
std::optional<std::string> ClosestName(const std::string& word,
                                       const std::vector<std::string>& candidates);

/// The one line to print for a parse error of `app` on `argv` (without the
/// "tandem: usage error: " prefix): CLI11's message, or for a flag that the
/// subcommand `argv` names does not have "tandem k8s render has no option
/// '--kindd'; did you mean '--kind'?", for a missing subcommand the ones
/// there are, and a hint to put the program after '--' when `tandem launch`
/// met words it does not know. Pure apart from reading `app`.
std::string DescribeUsageError(const CLI::App& app, const CLI::ParseError& error,
                               const std::vector<std::string>& argv);

/// Throws CLI::ExtrasError naming an unknown subcommand and the closest one
/// ("'rendr' is not a tandem k8s command; did you mean 'render'?"), or else
/// listing them, when a word of `argv` before '--' stands where `app` or
/// one of its subcommands requires a subcommand and names none; CLI11 would
/// only say that a subcommand is required. Call before parsing. Pure apart
/// from reading `app`.
void CheckSubcommand(const CLI::App& app, const std::vector<std::string>& argv);

}  // namespace tandem::cli
