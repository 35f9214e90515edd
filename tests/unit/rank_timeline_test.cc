// The timelines of jobs that mpirun, srun or ssh started: each process's
// file renamed for its label when it ends, the files merged by the
// launcher when all are on its host, and named for `tandem timeline merge`
// when not (docs/metrics.md).
#include "launch/rank_timeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/timeline.h"

namespace tandem::launch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A directory of its own for each test, removed afterwards.
struct ScratchDirectory {
  ScratchDirectory()
      : path(fs::temp_directory_path() /
             ("tandem-rank-timeline-" + std::to_string(::getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::create_directories(path);
  }
  ~ScratchDirectory() { fs::remove_all(path); }
  fs::path path;
};

// Writes a complete timeline as a process labelled `name` would.
void WriteTimeline(const std::string& file, int pid, const std::string& name) {
  base::Timeline timeline(file, pid, name);
  auto now = std::chrono::steady_clock::now();
  timeline.Span("allreduce", "allreduce", now, now + std::chrono::microseconds(5));
  timeline.Close();
}

std::string Captured(int fd) {
  std::string text(static_cast<size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  ::pread(fd, text.data(), text.size(), 0);
  return text;
}

std::vector<ProcessSpec> Job(const std::string& timeline, std::vector<std::string> labels) {
  std::vector<ProcessSpec> specs;
  for (auto& label : labels) {
    ProcessSpec spec;
    spec.label = std::move(label);
    if (!timeline.empty()) spec.env["TANDEM_TIMELINE"] = timeline;
    specs.push_back(std::move(spec));
  }
  return specs;
}

TEST(RankTimelineTest, FileNamesAreTheLabelsWithDashes) {
  EXPECT_EQ(RankTimelineFile("/t/trace.json", "worker 3"), "/t/trace.json.worker-3");
  EXPECT_EQ(RankTimelineFile("trace", "scheduler"), "trace.scheduler");
  EXPECT_EQ(RankTimelineFile("t", "server 0/x"), "t.server-0-x");
}

TEST(RankTimelineTest, KeepRenamesThePidFileForTheLabel) {
  ScratchDirectory dir;
  const std::string path = (dir.path / "trace.json").string();
  WriteTimeline(path + ".4711", 4711, "worker 3");
  auto kept = KeepRankTimeline({{"TANDEM_TIMELINE", path}}, "", 4711, "worker 3");
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(*kept, path + ".worker-3");
  EXPECT_TRUE(fs::exists(path + ".worker-3"));
  EXPECT_FALSE(fs::exists(path + ".4711"));
  // Nothing to keep: no variable, or no file of that pid.
  EXPECT_FALSE(KeepRankTimeline({}, "", 4711, "worker 3").has_value());
  EXPECT_FALSE(KeepRankTimeline({{"TANDEM_TIMELINE", path}}, "", 4712, "worker 4").has_value());
}

TEST(RankTimelineTest, KeepTakesARelativePathFromTheProcesssDirectory) {
  ScratchDirectory dir;
  WriteTimeline((dir.path / "t.json.99").string(), 99, "server 0");
  auto kept = KeepRankTimeline({{"TANDEM_TIMELINE", "t.json"}}, dir.path.string(), 99, "server 0");
  ASSERT_TRUE(kept.has_value());
  EXPECT_TRUE(fs::exists(dir.path / "t.json.server-0"));
}

class MergeRankTimelinesTest : public ::testing::Test {
 protected:
  MergeRankTimelinesTest() : sink_fd_(::memfd_create("sink", MFD_CLOEXEC)) {}
  ~MergeRankTimelinesTest() override { ::close(sink_fd_); }
  ScratchDirectory dir_;
  int sink_fd_;
};

TEST_F(MergeRankTimelinesTest, MergesEveryProcesssFileAndRemovesThem) {
  const std::string path = (dir_.path / "trace.json").string();
  // Processes of two hosts with the same pid keep a track each.
  WriteTimeline(path + ".scheduler", 100, "scheduler");
  WriteTimeline(path + ".worker-0", 100, "worker 0");
  WriteTimeline(path + ".worker-1", 200, "worker 1");
  MergeRankTimelines(Job(path, {"scheduler", "worker 0", "worker 1"}), OutputSink(sink_fd_));
  EXPECT_THAT(Captured(sink_fd_),
              HasSubstr("[launcher] timeline: merged 3 of 3 processes (9 events) into " + path));
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  std::set<std::string> names;
  std::set<int64_t> pids;
  for (const auto& e : doc["traceEvents"]) {
    if (e["name"] == "process_name") {
      names.insert(e["args"]["name"].get<std::string>());
      pids.insert(e["pid"].get<int64_t>());
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"scheduler", "worker 0", "worker 1"}));
  EXPECT_EQ(pids.size(), 3u);
  EXPECT_FALSE(fs::exists(path + ".worker-0"));
}

TEST_F(MergeRankTimelinesTest, MergesWhatIsThereAndNamesTheMissingProcesses) {
  const std::string path = (dir_.path / "trace.json").string();
  WriteTimeline(path + ".worker-0", 100, "worker 0");
  MergeRankTimelines(Job(path, {"worker 0", "worker 1", "worker 2"}), OutputSink(sink_fd_));
  const std::string said = Captured(sink_fd_);
  EXPECT_THAT(said, HasSubstr("timeline: merged 1 of 3 processes (3 events) into " + path +
                              "; missing: worker 1 (no file), worker 2 (no file)"));
  EXPECT_THAT(said, HasSubstr("tandem timeline merge -o all.json " + path + " FILES..."));
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["traceEvents"].size(), 3u);
  EXPECT_EQ(doc["otherData"]["tandem_missing"], nlohmann::json::array({"worker 1", "worker 2"}));
  EXPECT_FALSE(fs::exists(path + ".worker-0"));
}

TEST_F(MergeRankTimelinesTest, KeepsTheCompleteEventsOfAKilledProcesssFile) {
  const std::string path = (dir_.path / "trace.json").string();
  WriteTimeline(path + ".worker-0", 100, "worker 0");
  // worker 1 was killed: its file has no end and a cut last event.
  std::ofstream(path + ".worker-1")
      << "{\"traceEvents\": [\n{\"name\":\"a\",\"ph\":\"i\",\"pid\":200,\"ts\":1},\n"
         "{\"name\":\"b\",\"ph\":\"i\",\"pid\":200,\"ts\":2},\n{\"name\":\"c\",\"ph";
  MergeRankTimelines(Job(path, {"worker 0", "worker 1"}), OutputSink(sink_fd_));
  const std::string said = Captured(sink_fd_);
  EXPECT_THAT(said, HasSubstr("timeline: merged 2 of 2 processes (5 events) into " + path +
                              "; unfinished (killed before closing it; its complete events "
                              "kept): worker 1"));
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"]) names.insert(e["name"].get<std::string>());
  EXPECT_TRUE(names.count("a") == 1 && names.count("b") == 1 && names.count("c") == 0);
  EXPECT_EQ(doc["otherData"]["tandem_unfinished"], nlohmann::json::array({"worker 1"}));
}

// After a failed job: a file that is not there and one that holds no event
// (killed before its first write) are both missing; the complete events of
// a cut one are kept; the survivors' are all there.
TEST_F(MergeRankTimelinesTest, AfterAFailureNamesEmptyAndAbsentFilesAsMissing) {
  const std::string path = (dir_.path / "trace.json").string();
  WriteTimeline(path + ".worker-0", 100, "worker 0");
  std::ofstream(path + ".worker-1") << "";
  std::ofstream(path + ".worker-2")
      << "{\"traceEvents\": [\n{\"name\":\"a\",\"ph\":\"i\",\"pid\":300,\"ts\":1},\n{\"na";
  WriteTimeline(path + ".worker-4", 500, "worker 4");
  MergeRankTimelines(Job(path, {"worker 0", "worker 1", "worker 2", "worker 3", "worker 4"}),
                     OutputSink(sink_fd_));
  EXPECT_THAT(Captured(sink_fd_),
              HasSubstr("timeline: merged 3 of 5 processes (7 events) into " + path +
                        "; missing: worker 3 (no file), worker 1 (empty file)"
                        "; unfinished (killed before closing it; its complete events kept): "
                        "worker 2\n"));
  std::ifstream in(path);
  auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["traceEvents"].size(), 7u);
  EXPECT_EQ(doc["otherData"]["tandem_missing"], nlohmann::json::array({"worker 3", "worker 1"}));
  EXPECT_EQ(doc["otherData"]["tandem_unfinished"], nlohmann::json::array({"worker 2"}));
  for (const char* rank : {"0", "1", "2", "4"}) {
    EXPECT_FALSE(fs::exists(path + ".worker-" + rank)) << rank;
  }
}

TEST_F(MergeRankTimelinesTest, DoesNothingWithoutATimeline) {
  MergeRankTimelines(Job("", {"worker 0"}), OutputSink(sink_fd_));
  EXPECT_EQ(Captured(sink_fd_), "");
}

}  // namespace
}  // namespace tandem::launch
