// src/cli/usage_errors.*: the closest valid name for a misspelt subcommand
// or flag, and the one line a parse error becomes (docs/deploy.md, "Exit
// codes"). The binary's exit codes are checked by
// tests/system/test_usage_errors.py.
#include "cli/usage_errors.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {
namespace {

struct ClosestCase {
  std::string word;
  std::vector<std::string> candidates;
  std::optional<std::string> expected;
};

class ClosestNameTest : public ::testing::TestWithParam<ClosestCase> {};

TEST_P(ClosestNameTest, SuggestsOnlyASlip) {
  const ClosestCase& c = GetParam();
  EXPECT_EQ(ClosestName(c.word, c.candidates), c.expected) << "word " << c.word;
}

const std::vector<std::string> kCommands = {"launch", "scheduler", "server",
                                            "k8s",    "timeline",  "version"};
const std::vector<std::string> kFlags = {"--num-workers", "-n", "--num-servers", "-s",
                                         "--help",        "-h", "--env",         "--launcher"};

INSTANTIATE_TEST_SUITE_P(
    Names, ClosestNameTest,
    ::testing::Values(ClosestCase{"lanch", kCommands, "launch"},           // a dropped letter
                      ClosestCase{"luanch", kCommands, "launch"},          // a swap
                      ClosestCase{"schedular", kCommands, "scheduler"},    // a wrong letter
                      ClosestCase{"sever", kCommands, "server"},           // short: 1 edit
                      ClosestCase{"k9s", kCommands, "k8s"},                // 3 letters, 1 edit
                      ClosestCase{"frobnicate", kCommands, std::nullopt},  // nothing near
                      ClosestCase{"lnch", kCommands, std::nullopt},        // 4 letters, 2 edits
                      ClosestCase{"launch", kCommands, "launch"},          // exact
                      ClosestCase{"--num-wrkers", kFlags, "--num-workers"},
                      ClosestCase{"--num-severs", kFlags, "--num-servers"},
                      ClosestCase{"--helpp", kFlags, "--help"},
                      ClosestCase{"--n", kFlags, "-n"},         // dashes not counted
                      ClosestCase{"-x", kFlags, std::nullopt},  // every letter differs
                      ClosestCase{"--bogus", kFlags, std::nullopt},
                      ClosestCase{"--evn", kFlags, "--env"},
                      ClosestCase{"x", {}, std::nullopt}));  // no candidates

TEST(ClosestNameTest, TiesGoToTheFirstCandidate) {
  EXPECT_EQ(ClosestName("cat", {"bat", "cab"}), "bat");
  EXPECT_EQ(ClosestName("cat", {"cab", "bat"}), "cab");
}

// A small `tandem`: launch (flags, takes the program after --), k8s render
// (a nested required subcommand) and version.
class UsageLineTest : public ::testing::Test {
 protected:
  UsageLineTest() {
    app_.require_subcommand(1);
    auto* launch = app_.add_subcommand("launch", "run a job");
    launch->add_option("-n,--num-workers", workers_);
    launch->add_option("command", command_);
    auto* k8s = app_.add_subcommand("k8s", "Kubernetes");
    k8s->require_subcommand(1);
    k8s->add_subcommand("render", "manifests")->add_option("--kind", kind_);
    app_.add_subcommand("version", "print the version");
  }

  // The line DescribeUsageError gives for `words` (after "tandem"), or ""
  // when they parse.
  std::string LineFor(const std::vector<std::string>& words) {
    std::vector<std::string> argv = {"tandem"};
    argv.insert(argv.end(), words.begin(), words.end());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    try {
      CheckSubcommand(app_, argv);
      app_.parse(static_cast<int>(args.size()), args.data());
    } catch (const CLI::ParseError& e) {
      return DescribeUsageError(app_, e, argv);
    }
    return "";
  }

  CLI::App app_{"tandem"};
  int workers_ = 0;
  std::vector<std::string> command_;
  std::string kind_;
};

struct LineCase {
  std::vector<std::string> words;
  std::string expected;
};

class UsageLineCases : public UsageLineTest, public ::testing::WithParamInterface<LineCase> {};

TEST_P(UsageLineCases, SaysWhatWasWrongInOneLine) {
  EXPECT_EQ(LineFor(GetParam().words), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    CommandLines, UsageLineCases,
    ::testing::Values(
        LineCase{{"lanch"}, "'lanch' is not a tandem command; did you mean 'launch'?"},
        LineCase{{"zzz"}, "'zzz' is not a tandem command (commands: launch, k8s, version)"},
        LineCase{{"k8s", "rendr"}, "'rendr' is not a tandem k8s command; did you mean 'render'?"},
        LineCase{{"k8s"}, "tandem k8s needs a command: render"},
        LineCase{{}, "tandem needs a command: launch, k8s, version"},
        LineCase{{"k8s", "render", "--kindd", "x"},
                 "tandem k8s render has no option '--kindd'; did you mean '--kind'?"},
        LineCase{{"launch", "--num-wrkers", "2", "--", "true"},
                 "tandem launch has no option '--num-wrkers'; did you mean '--num-workers'?"},
        LineCase{{"launch", "-x", "--", "true"}, "tandem launch has no option '-x'"},
        // A flag's value is not taken for a subcommand or a flag.
        LineCase{{"launch", "-n", "-3", "--bad"}, "tandem launch has no option '--bad'"},
        LineCase{{"launch", "-n", "2", "--", "prog", "--anything"}, ""}));

TEST_F(UsageLineTest, ProgramWordsWithoutDashDashGetTheHint) {
  CLI::App app{"tandem"};
  auto* launch = app.add_subcommand("launch", "run a job");
  int workers = 0;
  launch->add_option("-n", workers);
  const std::vector<std::string> argv = {"tandem", "launch", "-n", "2", "python3", "x.py"};
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  try {
    app.parse(static_cast<int>(args.size()), args.data());
    FAIL() << "parsed";
  } catch (const CLI::ParseError& e) {
    const std::string line = DescribeUsageError(app, e, argv);
    EXPECT_NE(line.find("put the program and its arguments after '--'"), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace tandem::cli
