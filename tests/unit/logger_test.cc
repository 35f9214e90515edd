#include "base/logger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

namespace tandem::base {
namespace {

// A pipe whose read end is drained by a thread, so writers never block on
// a full pipe. Lines() closes the write end and returns what was written.
class CapturedFd {
 public:
  CapturedFd() {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe() failed");
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    reader_ = std::thread([this] {
      char buffer[4096];
      for (;;) {
        ssize_t n = ::read(read_fd_, buffer, sizeof(buffer));
        if (n <= 0) return;
        text_.append(buffer, static_cast<size_t>(n));
      }
    });
  }
  ~CapturedFd() {
    CloseWriteEnd();
    if (reader_.joinable()) reader_.join();
    ::close(read_fd_);
  }
  int fd() const { return write_fd_; }

  std::vector<std::string> Lines() {
    CloseWriteEnd();
    reader_.join();
    std::vector<std::string> lines;
    std::istringstream in(text_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  const std::string& text() const { return text_; }

 private:
  void CloseWriteEnd() {
    if (write_fd_ >= 0) ::close(write_fd_);
    write_fd_ = -1;
  }

  int read_fd_ = -1;
  int write_fd_ = -1;
  std::string text_;  // written by reader_ only, read after it is joined
  std::thread reader_;
};

struct ParsedLine {
  std::string tag;
  char level = '?';
  std::string text;
};

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The stamp's length: "2026-11-27T00:35:32.648Z", ISO 8601 in UTC.
constexpr size_t kStampLength = 24;

// True when `v` is an ISO 8601 UTC time with milliseconds, as the logger
// writes it ("2026-11-27T00:35:32.648Z").
bool IsIsoStamp(std::string_view v) {
  return v.size() == kStampLength && IsDigits(v.substr(0, 4)) && v[4] == '-' &&
         IsDigits(v.substr(5, 2)) && v[7] == '-' && IsDigits(v.substr(8, 2)) && v[10] == 'T' &&
         IsDigits(v.substr(11, 2)) && v[13] == ':' && IsDigits(v.substr(14, 2)) && v[16] == ':' &&
         IsDigits(v.substr(17, 2)) && v[19] == '.' && IsDigits(v.substr(20, 3)) && v[23] == 'Z';
}

// Splits "[<ISO 8601 stamp> <tag> <level>] <text>", failing the test when the
// line has another shape.
ParsedLine Parse(const std::string& line) {
  const std::string_view v(line);
  const size_t close = v.find("] ");
  const size_t tag_start = kStampLength + 2;
  const bool stamp_ok = v.size() > tag_start && v[0] == '[' &&
                        IsIsoStamp(v.substr(1, kStampLength)) && v[kStampLength + 1] == ' ';
  // Between the stamp and "] ": a non-empty tag, a space, one level letter.
  if (!stamp_ok || close == std::string_view::npos || close < tag_start + 3 ||
      v[close - 2] != ' ' ||
      std::string_view("IWE12").find(v[close - 1]) == std::string_view::npos) {
    ADD_FAILURE() << "malformed log line: '" << line << "'";
    return {};
  }
  return {std::string(v.substr(tag_start, close - 2 - tag_start)), v[close - 1],
          std::string(v.substr(close + 2))};
}

// "thread <t> line <i> <40 letters>" as the concurrency test writes it.
struct Body {
  int thread = -1;
  int line = -1;
  std::string letters;
};

Body ParseBody(const std::string& text) {
  std::istringstream in(text);
  std::string word_thread, word_line;
  Body b;
  in >> word_thread >> b.thread >> word_line >> b.line >> b.letters;
  if (!in || word_thread != "thread" || word_line != "line" || !in.eof()) {
    ADD_FAILURE() << "malformed body: '" << text << "'";
    return {};
  }
  return b;
}

// (PS_VERBOSE, quiet): quiet is an explicit PS_VERBOSE=0.
class LoggerVerbosityTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(LoggerVerbosityTest, PsVerboseGatesV1AndV2AndQuietDropsInfo) {
  const auto [verbosity, quiet] = GetParam();
  CapturedFd out;
  {
    Logger log("worker 3", verbosity, out.fd(), quiet);
    EXPECT_EQ(log.verbosity(), verbosity);
    log.Info("info {}", 1);
    log.Warn("warn {}", 2);
    log.Error("error {}", 3);
    log.V1("connections {}", 4);
    log.V2("message {}", 5);
  }
  std::vector<ParsedLine> lines;
  for (const std::string& line : out.Lines()) lines.push_back(Parse(line));

  std::vector<std::string> expected;
  if (!quiet) expected.push_back("I info 1");
  expected.push_back("W warn 2");
  expected.push_back("E error 3");
  if (verbosity >= 1) expected.push_back("1 connections 4");
  if (verbosity >= 2) expected.push_back("2 message 5");
  std::vector<std::string> got;
  for (const ParsedLine& l : lines) {
    EXPECT_EQ(l.tag, "worker 3");
    got.push_back(std::string(1, l.level) + " " + l.text);
  }
  EXPECT_EQ(got, expected);
}

INSTANTIATE_TEST_SUITE_P(Levels, LoggerVerbosityTest,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Bool()));

TEST(LoggerTest, StampIsTheCurrentUtcTimeInIso8601) {
  CapturedFd out;
  const std::time_t before = std::time(nullptr);
  Logger("scheduler", 0, out.fd()).Warn("now");
  const std::time_t after = std::time(nullptr);
  const std::vector<std::string> lines = out.Lines();
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_EQ(Parse(lines[0]).text, "now");
  std::tm tm{};
  std::istringstream in(lines[0].substr(1, 19));
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  ASSERT_FALSE(in.fail()) << lines[0];
  const std::time_t stamped = timegm(&tm);  // the stamp is UTC ('Z')
  EXPECT_GE(stamped, before) << lines[0];
  EXPECT_LE(stamped, after) << lines[0];
}

TEST(LoggerTest, SetTagRenamesLaterLines) {
  CapturedFd out;
  Logger log("worker", 0, out.fd());
  log.Info("before");
  log.SetTag("worker 5");
  EXPECT_EQ(log.tag(), "worker 5");
  log.Info("after");
  const std::vector<std::string> lines = out.Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(Parse(lines[0]).tag, "worker");
  EXPECT_EQ(Parse(lines[0]).text, "before");
  EXPECT_EQ(Parse(lines[1]).tag, "worker 5");
  EXPECT_EQ(Parse(lines[1]).text, "after");
}

TEST(LoggerTest, EveryLineEndsWithANewline) {
  CapturedFd out;
  Logger log("scheduler", 0, out.fd());
  log.Info("one");
  log.Info("two");
  out.Lines();
  const std::string& text = out.text();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
}

class LoggerConcurrencyTest : public ::testing::TestWithParam<int> {};

TEST_P(LoggerConcurrencyTest, LinesOfConcurrentThreadsNeverInterleave) {
  const int threads = GetParam();
  constexpr int kLinesPerThread = 300;
  CapturedFd out;
  Logger log("server 1", 2, out.fd());
  std::vector<std::thread> writers;
  for (int t = 0; t < threads; ++t) {
    writers.emplace_back([&log, t] {
      for (int i = 0; i < kLinesPerThread; ++i) {
        log.V2("thread {} line {} {}", t, i, std::string(40, static_cast<char>('a' + t)));
      }
    });
  }
  for (std::thread& w : writers) w.join();
  const std::vector<std::string> lines = out.Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(threads * kLinesPerThread));
  std::vector<int> next(threads, 0);
  for (const std::string& line : lines) {
    const Body body = ParseBody(Parse(line).text);
    ASSERT_GE(body.thread, 0) << line;
    ASSERT_LT(body.thread, threads) << line;
    // Each thread's own lines arrive whole and in order.
    EXPECT_EQ(body.line, next[body.thread]++);
    EXPECT_EQ(body.letters, std::string(40, static_cast<char>('a' + body.thread)));
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, LoggerConcurrencyTest, ::testing::Values(1, 4));

}  // namespace
}  // namespace tandem::base
