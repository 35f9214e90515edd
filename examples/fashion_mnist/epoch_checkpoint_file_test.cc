// The per-epoch checkpoint file (epoch_checkpoint_file.h) against every kind
// of damage a disk or a person can do to it, well-formed files that another
// job wrote, and writes that fail for real (a rename onto a directory, a
// file-size limit that cuts a write short like a full disk): a damaged file
// is refused with its path, what was expected and what was found, and a
// failed write leaves no temporary file and the previous checkpoint intact.
#include "epoch_checkpoint_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "kv/checkpoint_directory.h"
#include "kv/checkpoint_format.h"
#include "tandem/error.h"

namespace fashion_mnist {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kWorkers = 2;
// Header (32 bytes), then the body: u64 user-state length, then the resume
// state (34 bytes of fields), then the local state (the "weights").
constexpr size_t kLocalStateOffset = 32 + 8 + 34;

ResumeState State(int32_t epochs, size_t local_bytes) {
  ResumeState s;
  s.epoch = epochs;
  s.steps_done = 20 * epochs;
  s.next_step = 0;
  s.local_state.resize(local_bytes);
  for (size_t i = 0; i < local_bytes; ++i) s.local_state[i] = static_cast<char>(i * 13 + epochs);
  return s;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteAll(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::set<std::string> Names(const fs::path& dir) {
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// What ReadEpochCheckpoint throws as InvalidArgument ("" when it does not).
std::string RefusalOf(const fs::path& dir, uint32_t workers = kWorkers) {
  try {
    ReadEpochCheckpoint(dir.string(), workers);
  } catch (const tandem::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// A fresh directory per test, removed afterwards.
class EpochCheckpointDir {
 public:
  EpochCheckpointDir() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = fs::temp_directory_path() /
           ("epoch_checkpoint_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~EpochCheckpointDir() { fs::remove_all(dir_); }
  EpochCheckpointDir(const EpochCheckpointDir&) = delete;
  EpochCheckpointDir& operator=(const EpochCheckpointDir&) = delete;

  const fs::path& path() const { return dir_; }
  fs::path file() const { return dir_ / kEpochCheckpointName; }

 private:
  fs::path dir_;
};

TEST(EpochCheckpointFileTest, ReadsBackWhatWasWrittenAndTheNewestWins) {
  EpochCheckpointDir dir;
  WriteEpochCheckpoint(dir.path().string(), State(1, 5000), kWorkers);
  WriteEpochCheckpoint(dir.path().string(), State(2, 7000), kWorkers);
  const ResumeState read = ReadEpochCheckpoint(dir.path().string(), kWorkers);
  const ResumeState want = State(2, 7000);
  EXPECT_EQ(read.epoch, want.epoch);
  EXPECT_EQ(read.steps_done, want.steps_done);
  EXPECT_EQ(read.next_step, 0);
  EXPECT_EQ(read.local_state, want.local_state);
  EXPECT_EQ(Names(dir.path()), std::set<std::string>{kEpochCheckpointName});
}

// One way to damage a written file, and what the refusal must say.
struct Damage {
  std::string name;
  std::function<void(std::string&)> apply;
  std::string says;  // part of the refusal that names what was found
};

void Flip(std::string& bytes, size_t at) { bytes.at(at) = static_cast<char>(bytes.at(at) ^ 0x01); }

std::vector<Damage> Damages() {
  return {
      {"flipped_byte_in_header", [](std::string& b) { Flip(b, 8); }, "checksum mismatch"},
      {"flipped_byte_in_weights", [](std::string& b) { Flip(b, kLocalStateOffset + 1234); },
       "checksum mismatch"},
      {"flipped_byte_in_resume_state", [](std::string& b) { Flip(b, 32 + 8 + 6); },
       "checksum mismatch"},
      {"flipped_byte_in_checksum", [](std::string& b) { Flip(b, b.size() - 1); },
       "checksum mismatch"},
      {"flipped_byte_in_body_length", [](std::string& b) { Flip(b, 24); }, "truncated"},
      {"truncated", [](std::string& b) { b.resize(b.size() - 100); }, "truncated"},
      {"cut_inside_the_header", [](std::string& b) { b.resize(20); },
       "truncated: 20 bytes, a checkpoint file has at least 36"},
      {"zero_length", [](std::string& b) { b.clear(); },
       "truncated: 0 bytes, a checkpoint file has at least 36"},
      {"trailing_bytes", [](std::string& b) { b += "extra"; }, "trailing bytes"},
      {"wrong_magic", [](std::string& b) { b.replace(0, 4, "PK\x03\x04"); },
       "bad magic 0x04034b50 (expected 0x4b434454)"},
      {"wrong_version", [](std::string& b) { b[4] = 2; }, "version 2 (this build reads version 1)"},
      {"another_kind", [](std::string& b) { b[6] = 3; }, "checksum mismatch"},
  };
}

class DamagedEpochCheckpointTest : public ::testing::TestWithParam<Damage> {};

TEST_P(DamagedEpochCheckpointTest, IsRefusedNamingTheFileAndWhatWasFound) {
  EpochCheckpointDir dir;
  WriteEpochCheckpoint(dir.path().string(), State(3, 4096), kWorkers);
  std::string bytes = ReadAll(dir.file());
  GetParam().apply(bytes);
  WriteAll(dir.file(), bytes);
  const std::string refusal = RefusalOf(dir.path());
  EXPECT_NE(refusal.find("checkpoint file " + dir.file().string() + ": "), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find(GetParam().says), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("--resume cannot continue from it"), std::string::npos) << refusal;
}

INSTANTIATE_TEST_SUITE_P(EveryDamage, DamagedEpochCheckpointTest, ::testing::ValuesIn(Damages()),
                         [](const ::testing::TestParamInfo<Damage>& p) { return p.param.name; });

// A well-formed envelope (its checksum holds) with contents this job cannot
// take, and what the refusal must say.
struct Foreign {
  std::string name;
  std::function<tandem::kv::WorkerCheckpoint()> make;
  uint32_t reader_workers;
  std::string says;
};

std::vector<Foreign> Foreigns() {
  return {
      {"another_worker_count", [] { return EpochCheckpointContents(State(1, 64), 3); }, kWorkers,
       "written by worker 0 of a job of 3 workers, expected worker 0 of 2"},
      {"not_a_resume_state",
       [] {
         tandem::kv::WorkerCheckpoint c = EpochCheckpointContents(State(1, 64), kWorkers);
         c.user_state = "not the trainer's bytes at all";
         return c;
       },
       kWorkers, "resume state: not the trainer's (bad magic)"},
      {"round_differs_from_steps",
       [] {
         tandem::kv::WorkerCheckpoint c = EpochCheckpointContents(State(1, 64), kWorkers);
         c.header.round = 21;
         return c;
       },
       kWorkers, "not an epoch's end (header round 21; resume state: 20 steps"},
      {"mid_epoch_state",
       [] {
         ResumeState s = State(1, 64);
         s.next_step = 5;
         return EpochCheckpointContents(s, kWorkers);
       },
       kWorkers, "epoch 1, next step 5"},
      {"with_residuals",
       [] {
         tandem::kv::WorkerCheckpoint c = EpochCheckpointContents(State(1, 64), kWorkers);
         c.residuals.push_back({7, {1.0F, 2.0F}});
         return c;
       },
       kWorkers, "holds 1 compression residuals, expected none"},
  };
}

class ForeignEpochCheckpointTest : public ::testing::TestWithParam<Foreign> {};

TEST_P(ForeignEpochCheckpointTest, IsRefusedNamingTheFileAndWhatWasExpected) {
  EpochCheckpointDir dir;
  tandem::kv::WriteFileDurably(dir.file().string(),
                               tandem::kv::EncodeWorkerCheckpoint(GetParam().make()));
  const std::string refusal = RefusalOf(dir.path(), GetParam().reader_workers);
  EXPECT_NE(refusal.find("checkpoint file " + dir.file().string() + ": "), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find(GetParam().says), std::string::npos) << refusal;
}

INSTANTIATE_TEST_SUITE_P(EveryMismatch, ForeignEpochCheckpointTest, ::testing::ValuesIn(Foreigns()),
                         [](const ::testing::TestParamInfo<Foreign>& p) { return p.param.name; });

TEST(EpochCheckpointFileTest, MissingFileNamesTheDirectory) {
  EpochCheckpointDir dir;
  EXPECT_NE(RefusalOf(dir.path()).find("no complete checkpoint in " + dir.path().string()),
            std::string::npos);
}

TEST(EpochCheckpointFileTest, EarlierVersionsCheckpointIsNamedAsSuch) {
  EpochCheckpointDir dir;
  WriteAll(dir.path() / "weights.pt", "torch archive");
  WriteAll(dir.path() / "epoch", "1\n");
  const std::string refusal = RefusalOf(dir.path());
  EXPECT_NE(refusal.find("holds an earlier version's checkpoint"), std::string::npos) << refusal;
}

TEST(EpochCheckpointFileTest, RefusesToWriteAStateThatIsNoEpochsEnd) {
  EpochCheckpointDir dir;
  ResumeState s = State(1, 8);
  s.next_step = 3;
  EXPECT_THROW(WriteEpochCheckpoint(dir.path().string(), s, kWorkers), tandem::InvalidArgument);
  EXPECT_TRUE(Names(dir.path()).empty());
}

// Lowers the file-size limit for the test's life, so that a write past it
// fails part-way with EFBIG (a short write, then an error), as on a full
// disk. SIGXFSZ, which would end the process, is ignored meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = SIG_DFL;
};

// One real way for a save to fail, and the call the error must name.
struct Failure {
  std::string name;
  // Called with the directory just before the failing save; returns what
  // must stay in force during it.
  std::function<std::shared_ptr<void>(const fs::path&)> arrange;
  std::string call;
  std::set<std::string> left;  // the directory's names after the failure
};

std::vector<Failure> Failures() {
  return {
      {"rename_target_is_a_directory",
       [](const fs::path& dir) -> std::shared_ptr<void> {
         fs::remove(dir / kEpochCheckpointName);
         fs::create_directories(dir / kEpochCheckpointName / "occupied");
         return nullptr;
       },
       "rename ",
       {kEpochCheckpointName}},
      {"short_write_past_the_file_size_limit",
       [](const fs::path&) -> std::shared_ptr<void> {
         return std::make_shared<FileSizeLimit>(16 * 1024);
       },
       "write ",
       {kEpochCheckpointName}},
  };
}

class FailedEpochCheckpointWriteTest : public ::testing::TestWithParam<Failure> {};

TEST_P(FailedEpochCheckpointWriteTest, LeavesNoTemporaryFileBehind) {
  EpochCheckpointDir dir;
  WriteEpochCheckpoint(dir.path().string(), State(1, 4096), kWorkers);
  std::string error;
  {
    const std::shared_ptr<void> in_force = GetParam().arrange(dir.path());
    try {
      WriteEpochCheckpoint(dir.path().string(), State(2, 256 * 1024), kWorkers);
    } catch (const tandem::IoError& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find(GetParam().call), std::string::npos) << error;
  EXPECT_NE(error.find(dir.file().string()), std::string::npos) << error;
  EXPECT_EQ(Names(dir.path()), GetParam().left);
  EXPECT_FALSE(fs::exists(dir.path() / (std::string(kEpochCheckpointName) + ".tmp")));
  if (fs::is_regular_file(dir.file())) {
    // The previous checkpoint is whole.
    EXPECT_EQ(ReadEpochCheckpoint(dir.path().string(), kWorkers).local_state,
              State(1, 4096).local_state);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryFailure, FailedEpochCheckpointWriteTest,
                         ::testing::ValuesIn(Failures()),
                         [](const ::testing::TestParamInfo<Failure>& p) { return p.param.name; });

TEST(EpochCheckpointFileTest, StaleTemporariesOfThisExampleAndOnlyTheseAreRemoved) {
  EpochCheckpointDir dir;
  const std::vector<std::string> ours = {"weights.ckpt.tmp", "weights.pt.tmp", "worker-sgd.pt.tmp",
                                         "epoch.tmp"};
  const std::vector<std::string> theirs = {"kv-optimizer.server0.tmp", "notes.tmp", "weights.ckpt"};
  for (const std::string& name : ours) WriteAll(dir.path() / name, "partial");
  for (const std::string& name : theirs) WriteAll(dir.path() / name, "kept");
  fs::create_directories(dir.path() / "round-20");
  WriteAll(dir.path() / "round-20" / "worker-0.ckpt.tmp", "the store's");
  const std::vector<std::string> removed = RemoveStaleCheckpointTemporaries(dir.path().string());
  EXPECT_EQ(removed.size(), ours.size());
  std::set<std::string> left(theirs.begin(), theirs.end());
  left.insert("round-20");
  EXPECT_EQ(Names(dir.path()), left);
  EXPECT_TRUE(fs::exists(dir.path() / "round-20" / "worker-0.ckpt.tmp"));
  EXPECT_TRUE(RemoveStaleCheckpointTemporaries(dir.path().string()).empty());
}

}  // namespace
}  // namespace fashion_mnist
