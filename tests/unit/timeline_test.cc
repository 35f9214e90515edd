// The Chrome-trace timeline: valid JSON with named tracks, spans and
// instants; files of several processes merged into one.
#include "base/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tandem/error.h"

namespace tandem::base {
namespace {

namespace fs = std::filesystem;

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem-timeline-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static nlohmann::json Read(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  }
  fs::path dir_;
};

TEST_F(TimelineTest, WritesSpansAndInstantsOnNamedTracks) {
  SteadyTime t0 = std::chrono::steady_clock::now();
  {
    Timeline tl(Path("w0.json"), 7, "worker 0");
    tl.Span("push", "key 3", t0, t0 + std::chrono::microseconds(250), {{"bytes", "4096"}});
    tl.Span("allreduce", "grad.fc1", t0, t0 + std::chrono::milliseconds(2));
    tl.Instant("push", "peer lost", t0);
    EXPECT_EQ(tl.events(), 1u + 2u + 3u);  // process name, two track names, three events
  }
  nlohmann::json doc = Read(Path("w0.json"));
  const auto& events = doc.at("traceEvents");
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0]["ph"], "M");
  EXPECT_EQ(events[0]["args"]["name"], "worker 0");
  int spans = 0;
  for (const auto& e : events) {
    EXPECT_EQ(e["pid"], 7);
    if (e["ph"] == "X") {
      ++spans;
      if (e["name"] == "key 3") {
        EXPECT_EQ(e["dur"], 250);
        EXPECT_EQ(e["args"]["bytes"], "4096");
      }
    }
  }
  EXPECT_EQ(spans, 2);
}

TEST_F(TimelineTest, ConcurrentWritersProduceOneValidFile) {
  {
    Timeline tl(Path("many.json"), 1, "server 0");
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&tl, t] {
        auto now = std::chrono::steady_clock::now();
        for (int i = 0; i < 5000; ++i) tl.Span("merge", "key " + std::to_string(t), now, now);
      });
    }
    for (auto& th : threads) th.join();
  }
  auto doc = Read(Path("many.json"));
  // 20000 spans, one process name, one track name.
  EXPECT_EQ(doc["traceEvents"].size(), 20002u);
}

TEST_F(TimelineTest, MergeJoinsProcessesAndKeepsWhatUnfinishedFilesHold) {
  SteadyTime t0 = std::chrono::steady_clock::now();
  for (int rank = 0; rank < 3; ++rank) {
    Timeline tl(Path("w" + std::to_string(rank) + ".json"), rank, "worker " + std::to_string(rank));
    tl.Span("allreduce", "t", t0, t0);
  }
  MergeTimelines(Path("all.json"), {Path("w0.json"), Path("w1.json"), Path("w2.json")});
  auto doc = Read(Path("all.json"));
  std::set<int> pids;
  for (const auto& e : doc["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(doc["traceEvents"].size(), 9u);

  // A killed process's file: its complete events are kept.
  std::ofstream(Path("cut.json")) << "{\"traceEvents\": [\n{\"ph\":\"M\"},\n{\"ph\":";
  const TimelineMerge merged = MergeTimelines(Path("x.json"), {Path("cut.json")}, {"worker 9"});
  EXPECT_EQ(merged.events, 1u);
  EXPECT_EQ(merged.unfinished, std::vector<std::string>{Path("cut.json")});
  EXPECT_EQ(Read(Path("x.json"))["otherData"]["tandem_missing"],
            nlohmann::json::array({"worker 9"}));
  // Killed before its first flush, or after the header alone: as good as
  // missing, and named with the missing ones.
  std::ofstream(Path("empty.json")) << "";
  std::ofstream(Path("header.json")) << "{\"traceEvents\": [\n";
  const TimelineMerge empty =
      MergeTimelines(Path("x.json"), {Path("empty.json"), Path("cut.json"), Path("header.json")},
                     {"worker 9"}, {"worker 1", "worker 2", "worker 3"});
  EXPECT_EQ(empty.empty, (std::vector<std::string>{Path("empty.json"), Path("header.json")}));
  EXPECT_EQ(empty.unfinished, std::vector<std::string>{Path("cut.json")});
  EXPECT_EQ(Read(Path("x.json"))["otherData"]["tandem_missing"],
            nlohmann::json::array({"worker 9", "worker 1", "worker 3"}));
  EXPECT_EQ(Read(Path("x.json"))["otherData"]["tandem_unfinished"],
            nlohmann::json::array({"worker 2"}));
  std::ofstream(Path("junk.json")) << "not a trace";
  EXPECT_THROW(MergeTimelines(Path("x.json"), {Path("junk.json")}), InvalidArgument);
  std::ofstream(Path("array.json")) << "[1, 2]";
  EXPECT_THROW(MergeTimelines(Path("x.json"), {Path("array.json")}), InvalidArgument);
  EXPECT_THROW(MergeTimelines(Path("x.json"), {Path("absent.json")}), IoError);
}

TEST_F(TimelineTest, AnUncreatableFileIsAnIoErrorNamingIt) {
  try {
    Timeline tl(Path("no/such/dir/t.json"), 0, "x");
    FAIL() << "created";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir/t.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::base
