// Tests of the line splitting and prefixing of children's output, and of
// how an exit is described.
#include "launch/prefixed_output.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "launch/exit_status.h"
#include "tandem/error.h"

namespace tandem::launch {
namespace {

// What a sink wrote, read back from an in-memory file.
class Captured {
 public:
  Captured() : fd_(::memfd_create("prefixed-output", MFD_CLOEXEC)), sink_(fd_) {}
  ~Captured() { ::close(fd_); }
  OutputSink* sink() { return &sink_; }
  std::string Text() const {
    struct stat st {};
    ::fstat(fd_, &st);
    std::string text(static_cast<size_t>(st.st_size), '\0');
    ssize_t n = ::pread(fd_, text.data(), text.size(), 0);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return text;
  }

 private:
  int fd_;
  OutputSink sink_;
};

TEST(LinePrefixerTest, PrefixesCompleteLinesAndHoldsThePartialOne) {
  Captured out;
  LinePrefixer lines("[worker 1] ", out.sink());
  lines.Append("one\ntw");
  EXPECT_EQ(out.Text(), "[worker 1] one\n");
  EXPECT_TRUE(lines.has_partial());
  lines.Append("o\n\nthree");
  EXPECT_EQ(out.Text(), "[worker 1] one\n[worker 1] two\n[worker 1] \n");
  lines.Flush();
  EXPECT_EQ(out.Text(), "[worker 1] one\n[worker 1] two\n[worker 1] \n[worker 1] three\n");
  EXPECT_FALSE(lines.has_partial());
  lines.Flush();  // nothing held: writes nothing
  EXPECT_EQ(out.Text(), "[worker 1] one\n[worker 1] two\n[worker 1] \n[worker 1] three\n");
}

TEST(LinePrefixerTest, SplitsLinesLongerThanTheLimit) {
  Captured out;
  LinePrefixer lines("[s] ", out.sink(), 4);
  lines.Append("abcdefghij\nxy");
  lines.Append("zw\n");
  EXPECT_EQ(out.Text(), "[s] abcd\n[s] efgh\n[s] ij\n[s] xyzw\n");
}

TEST(LinePrefixerTest, ALineOfExactlyTheLimitStaysWhole) {
  Captured out;
  LinePrefixer lines("[s] ", out.sink(), 4);
  lines.Append("ab");
  lines.Append("cd\nef\n");
  EXPECT_EQ(out.Text(), "[s] abcd\n[s] ef\n");
}

TEST(OutputSinkTest, TurnsOffWhenTheReaderIsGone) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);
  // EPIPE rather than death by SIGPIPE: block it while writing, as the
  // supervisor does, and discard the pending signal afterwards.
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &pipe_set, &old), 0);
  OutputSink sink(fds[1]);
  EXPECT_FALSE(sink.broken());
  sink.WriteLine("lost\n");
  EXPECT_TRUE(sink.broken());
  sink.WriteLine("also lost\n");  // dropped, no error
  EXPECT_TRUE(sink.broken());
  timespec zero{0, 0};
  while (::sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(fds[1]);
}

TEST(ExitStatusTest, DescribesExitsAndSignals) {
  EXPECT_EQ(ExitStatus::Exited(0).Describe(), "exited with status 0");
  EXPECT_TRUE(ExitStatus::Exited(0).success());
  EXPECT_EQ(ExitStatus::Exited(3).ShellCode(), 3);
  EXPECT_FALSE(ExitStatus::Exited(3).success());
  EXPECT_EQ(ExitStatus::Killed(SIGKILL).Describe(), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(ExitStatus::Killed(SIGINT).ShellCode(), 130);
  EXPECT_FALSE(ExitStatus::Killed(SIGTERM).success());
  siginfo_t info{};
  info.si_code = CLD_DUMPED;
  info.si_status = SIGSEGV;
  EXPECT_EQ(ExitStatus::FromSiginfo(info).Describe(), "killed by signal 11 (SIGSEGV), core dumped");
  info.si_code = CLD_STOPPED;
  EXPECT_THROW(ExitStatus::FromSiginfo(info), InvalidArgument);
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
}

}  // namespace
}  // namespace tandem::launch
