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

}  // namespace

std::optional<std::string> ClosestName(const std::string& word,
                                       const std::vector<std::string>& candidates) {
  const size_t limit = word.size() <= 4 ? 1 : word.size() <= 8 ? 2 : 3;
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

void CheckSubcommand(const CLI::App& app, const std::vector<std::string>& argv) {
  if (argv.size() < 2 || argv[1].empty() || argv[1][0] == '-') return;
  if (ChosenSubcommand(app, argv) != nullptr) return;
  std::string message = fmt::format("'{}' is not a tandem command", argv[1]);
  if (auto near = ClosestName(argv[1], SubcommandNames(app))) {
    message += fmt::format("; did you mean '{}'?", *near);
  } else {
    message += fmt::format(" (commands: {})", fmt::join(SubcommandNames(app), ", "));
  }
  throw CLI::ExtrasError(message, CLI::ExitCodes::ExtrasError);
}

std::string DescribeUsageError(const CLI::App& app, const CLI::ParseError& error,
                               const std::vector<std::string>& argv) {
  std::string message = error.what();
  const CLI::App* sub = ChosenSubcommand(app, argv);
  // The deepest subcommand the words name (`k8s render`), and the first
  // word before '--' that is a flag it does not know.
  const CLI::App* scope = &app;
  std::string where = "tandem";
  bool skip_value = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (word == "--") break;
    if (skip_value) {
      skip_value = false;
      continue;
    }
    if (word.empty() || word[0] != '-') {
      for (const CLI::App* next : scope->get_subcommands([](const CLI::App*) { return true; })) {
        if (next->check_name(word)) {
          scope = next;
          where += " " + next->get_name();
          break;
        }
      }
      continue;
    }
    if (word.size() < 2 || (word[1] >= '0' && word[1] <= '9')) continue;  // a negative number
    const std::string name = word.substr(0, word.find('='));
    const std::vector<std::string> flags = FlagNames(*scope);
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) {
      skip_value = name == word && TakesValue(*scope, name);
      continue;
    }
    message = fmt::format("{} has no option '{}'", where, name);
    if (auto near = ClosestName(name, flags)) message += fmt::format("; did you mean '{}'?", *near);
    break;
  }
  if (sub != nullptr && sub->get_name() == "launch" &&
      std::find(argv.begin(), argv.end(), "--") == argv.end() &&
      dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    message +=
        " (put the program and its arguments after '--': tandem launch -n 2 -- python3 train.py "
        "--epochs 3)";
  }
  return message;
}

}  // namespace tandem::cli
