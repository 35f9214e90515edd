// docs/deploy.md, "Exit codes": a command-line mistake is one line and exit
// code 2; this file words that line.
#include "cli/usage_errors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace tandem::cli {
namespace {

// Optimal string alignment distance: Levenshtein plus swaps of neighbours.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string WithoutDashes(const std::string& name) {
  return name.substr(std::min(name.find_first_not_of('-'), name.size()));
}

std::vector<std::string> SubcommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

// Every long and short flag of `app` ("--num-workers", "-n").
std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
    for (const auto& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

// The subcommand argv names (argv[1]), when it is one.
const CLI::App* ChosenSubcommand(const CLI::App& app, const std::vector<std::string>& argv) {
  if (argv.size() < 2) return nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(argv[1])) return sub;
  }
  return nullptr;
}

// Whether `name` is a flag of `app` that takes a value.
bool TakesValue(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->check_name(name)) return opt->get_type_size() != 0;
  }
  return false;
}

// How far the words of a command line (before '--') name known things: the
// deepest subcommand they name, and the first word that is neither a flag
// of it nor one of its subcommands where it needs one.
struct CommandWalk {
  const CLI::App* scope;  ///< the deepest subcommand named (`k8s render`)
  std::string where;      ///< its words: "tandem k8s render"
  std::string unknown_flag;
  std::string unknown_command;
};

CommandWalk WalkCommandLine(const CLI::App& app, const std::vector<std::string>& argv) {
  CommandWalk walk{&app, "tandem", "", ""};
  bool skip_value = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (word == "--") break;
    if (skip_value) {
      skip_value = false;
      continue;
    }
    if (word.size() >= 2 && word[0] == '-') {
      if (word[1] >= '0' && word[1] <= '9') continue;  // a negative number
      const std::string name = word.substr(0, word.find('='));
      const std::vector<std::string> flags = FlagNames(*walk.scope);
      if (std::find(flags.begin(), flags.end(), name) == flags.end()) {
        walk.unknown_flag = name;
        break;
      }
      skip_value = name == word && TakesValue(*walk.scope, name);
      continue;
    }
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : walk.scope->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->check_name(word)) next = sub;
    }
    if (next != nullptr) {
      walk.scope = next;
      walk.where += " " + next->get_name();
      continue;
    }
    // A word where a subcommand must stand; elsewhere it is a positional
    // argument, which CLI11 checks.
    if (walk.scope->get_require_subcommand_min() > 0) walk.unknown_command = word;
    break;
  }
  return walk;
}

}  // namespace

std::optional<std::string> ClosestName(const std::string& word,
                                       const std::vector<std::string>& candidates) {
  const std::string bare = WithoutDashes(word);
  const size_t limit = bare.size() <= 4 ? 1 : bare.size() <= 8 ? 2 : 3;
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = EditDistance(bare, WithoutDashes(c));
    // A word all of whose letters would change ('-x' for '-n') is no slip.
    if (d < best_distance && d < bare.size()) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

void CheckSubcommand(const CLI::App& app, const std::vector<std::string>& argv) {
  const CommandWalk walk = WalkCommandLine(app, argv);
  if (walk.unknown_command.empty()) return;
  const std::vector<std::string> names = SubcommandNames(*walk.scope);
  std::string message = fmt::format("'{}' is not a {} command", walk.unknown_command, walk.where);
  if (auto near = ClosestName(walk.unknown_command, names)) {
    message += fmt::format("; did you mean '{}'?", *near);
  } else {
    message += fmt::format(" (commands: {})", fmt::join(names, ", "));
  }
  throw CLI::ExtrasError(message, CLI::ExitCodes::ExtrasError);
}

std::string DescribeUsageError(const CLI::App& app, const CLI::ParseError& error,
                               const std::vector<std::string>& argv) {
  std::string message = error.what();
  const CommandWalk walk = WalkCommandLine(app, argv);
  if (!walk.unknown_flag.empty()) {
    message = fmt::format("{} has no option '{}'", walk.where, walk.unknown_flag);
    if (auto near = ClosestName(walk.unknown_flag, FlagNames(*walk.scope))) {
      message += fmt::format("; did you mean '{}'?", *near);
    }
  } else if (walk.scope->get_require_subcommand_min() > 0 &&
             message.find("subcommand is required") != std::string::npos) {
    message = fmt::format("{} needs a command: {}", walk.where,
                          fmt::join(SubcommandNames(*walk.scope), ", "));
  }
  // Words launch does not know that are no flag: the program, without '--'.
  const CLI::App* sub = ChosenSubcommand(app, argv);
  if (walk.unknown_flag.empty() && sub != nullptr && sub->get_name() == "launch" &&
      std::find(argv.begin(), argv.end(), "--") == argv.end() &&
      dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    message +=
        " (put the program and its arguments after '--': tandem launch -n 2 -- python3 train.py "
        "--epochs 3)";
  }
  return message;
}

}  // namespace tandem::cli
