// A checkpoint directory (docs/checkpoints.md, "Directory"): rounds with a
// verified manifest count, a damaged or partial newest round is refused with
// the file named and the previous round chosen, and pruning keeps the two
// newest complete rounds.
#include "kv/checkpoint_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>

#include "tandem/error.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::path(::testing::TempDir()) /
            ("ckpt_dir_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// Writes every server and worker file of `round` (values derived from the
// round, so rounds differ) and, when `complete`, the manifest.
void WriteRound(const std::string& dir, uint64_t round, uint32_t servers, uint32_t workers,
                bool complete = true) {
  for (uint32_t s = 0; s < servers; ++s) {
    kv::ServerCheckpoint c;
    c.header = {kv::CheckpointKind::kServer, round, s, servers};
    kv::SavedKey k;
    k.key = s;
    k.count = k.total_elements = 2;
    k.value = std::string(8, static_cast<char>(round));
    c.keys.push_back(k);
    kv::WriteFileDurably(kv::CheckpointRoundDir(dir, round) + "/" + kv::ServerCheckpointName(s),
                         kv::EncodeServerCheckpoint(c));
  }
  for (uint32_t w = 0; w < workers; ++w) {
    kv::WorkerCheckpoint c;
    c.header = {kv::CheckpointKind::kWorker, round, w, workers};
    c.user_state = "worker " + std::to_string(w) + " at " + std::to_string(round);
    kv::WriteFileDurably(kv::CheckpointRoundDir(dir, round) + "/" + kv::WorkerCheckpointName(w),
                         kv::EncodeWorkerCheckpoint(c));
  }
  if (complete) kv::WriteCheckpointManifest(dir, round, servers, workers);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// (servers, workers)
using Shape = std::tuple<uint32_t, uint32_t>;
class CheckpointDirectory : public ::testing::TestWithParam<Shape> {};

TEST_P(CheckpointDirectory, NewestCompleteRoundVerifies) {
  const uint32_t servers = std::get<0>(GetParam());
  const uint32_t workers = std::get<1>(GetParam());
  TempDir dir;
  EXPECT_FALSE(kv::FindNewestConsistentRound(dir.str(), nullptr).has_value());
  WriteRound(dir.str(), 10, servers, workers);
  WriteRound(dir.str(), 20, servers, workers);
  const auto m = kv::FindNewestConsistentRound(dir.str(), nullptr);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->header.round, 20u);
  EXPECT_EQ(m->num_servers, servers);
  EXPECT_EQ(m->num_workers, workers);
  EXPECT_EQ(m->files.size(), servers + workers);
  EXPECT_FALSE(fs::exists(kv::CheckpointRoundDir(dir.str(), 20) + "/MANIFEST.tmp"));
}

// A save that stopped before its manifest: the round is ignored (reported),
// the previous one chosen.
TEST_P(CheckpointDirectory, PartialRoundWithoutManifestIsIgnored) {
  const uint32_t servers = std::get<0>(GetParam());
  const uint32_t workers = std::get<1>(GetParam());
  TempDir dir;
  WriteRound(dir.str(), 4, servers, workers);
  WriteRound(dir.str(), 8, servers, workers, /*complete=*/false);
  std::map<uint64_t, std::string> refused;
  const auto m = kv::FindNewestConsistentRound(
      dir.str(), [&](uint64_t r, const std::string& why) { refused[r] = why; });
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->header.round, 4u);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[8].find("round 8 has no MANIFEST"), std::string::npos) << refused[8];
  // Only partial rounds: nothing to load, not an error.
  TempDir only_partial;
  WriteRound(only_partial.str(), 3, servers, workers, false);
  EXPECT_FALSE(kv::FindNewestConsistentRound(only_partial.str(), nullptr).has_value());
}

TEST_P(CheckpointDirectory, PruningKeepsTheTwoNewestCompleteRounds) {
  const uint32_t servers = std::get<0>(GetParam());
  const uint32_t workers = std::get<1>(GetParam());
  TempDir dir;
  WriteRound(dir.str(), 1, servers, workers);
  WriteRound(dir.str(), 2, servers, workers, false);  // a crashed save, older than the kept
  WriteRound(dir.str(), 3, servers, workers);
  WriteRound(dir.str(), 5, servers, workers);
  WriteRound(dir.str(), 6, servers, workers, false);  // newer than every complete one: kept
  const auto removed = kv::PruneCheckpointRounds(dir.str(), 2);
  EXPECT_EQ(removed, (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(kv::ListCheckpointRounds(dir.str()), (std::vector<uint64_t>{6, 5, 3}));
  EXPECT_EQ(kv::FindNewestConsistentRound(dir.str(), nullptr)->header.round, 5u);
}

// A damage done to one file of the newest round, and what the refusal says.
struct FileDamage {
  const char* name;
  std::function<std::string(uint32_t servers)> file;  // inside the round's directory
  std::function<void(const std::string& path)> apply;
  const char* says;
};

const FileDamage kFileDamages[] = {
    {"flipped_byte", [](uint32_t s) { return kv::ServerCheckpointName(s - 1); },
     [](const std::string& p) {
       std::string b = Slurp(p);
       b[b.size() / 2] ^= 0x40;
       Spit(p, b);
     },
     "checksum mismatch"},
    {"truncated", [](uint32_t) { return kv::WorkerCheckpointName(0); },
     [](const std::string& p) {
       std::string b = Slurp(p);
       Spit(p, b.substr(0, b.size() - 5));
     },
     "truncated"},
    {"missing", [](uint32_t) { return kv::ServerCheckpointName(0); },
     [](const std::string& p) { fs::remove(p); }, "missing"},
    {"manifest_corrupt", [](uint32_t) { return std::string("MANIFEST"); },
     [](const std::string& p) {
       std::string b = Slurp(p);
       b[35] ^= 1;
       Spit(p, b);
     },
     "checksum mismatch"},
    // A valid file of another round put in its place: its checksum is
    // fine, the manifest's CRC and the header's round are not.
    {"swapped_for_older", [](uint32_t) { return kv::WorkerCheckpointName(0); },
     [](const std::string& p) {
       const std::string older =
           fs::path(p).parent_path().parent_path() / "round-7" / kv::WorkerCheckpointName(0);
       Spit(p, Slurp(older));
     },
     "header says round 7"},
};

using DamageParam = std::tuple<Shape, FileDamage>;
class CheckpointRoundDamage : public ::testing::TestWithParam<DamageParam> {};

TEST_P(CheckpointRoundDamage, NewestRoundIsRefusedAndThePreviousUsed) {
  const uint32_t servers = std::get<0>(std::get<0>(GetParam()));
  const uint32_t workers = std::get<1>(std::get<0>(GetParam()));
  const FileDamage& d = std::get<1>(GetParam());
  TempDir dir;
  WriteRound(dir.str(), 7, servers, workers);
  WriteRound(dir.str(), 12, servers, workers);
  const std::string path = kv::CheckpointRoundDir(dir.str(), 12) + "/" + d.file(servers);
  d.apply(path);
  std::map<uint64_t, std::string> refused;
  const auto m = kv::FindNewestConsistentRound(
      dir.str(), [&](uint64_t r, const std::string& why) { refused[r] = why; });
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->header.round, 7u);
  ASSERT_EQ(refused.size(), 1u);
  const std::string& why = refused[12];
  EXPECT_NE(why.find(path), std::string::npos) << why;
  EXPECT_NE(why.find(d.says), std::string::npos) << why;
  EXPECT_THROW(kv::VerifyCheckpointRound(dir.str(), 12), IoError);

  // Both rounds damaged: an error that lists both refusals.
  const std::string older = kv::CheckpointRoundDir(dir.str(), 7) + "/" + d.file(servers);
  if (std::string(d.name) != "swapped_for_older") d.apply(older);
  if (std::string(d.name) == "swapped_for_older") fs::remove(older);
  try {
    kv::FindNewestConsistentRound(dir.str(), nullptr);
    FAIL() << "no round verifies, yet one was chosen";
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no consistent checkpoint round in " + dir.str()), std::string::npos);
    EXPECT_NE(what.find("round 12: "), std::string::npos) << what;
    EXPECT_NE(what.find("round 7: "), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CheckpointDirectory,
                         ::testing::Values(Shape{1, 1}, Shape{2, 2}, Shape{3, 4}));

INSTANTIATE_TEST_SUITE_P(Kinds, CheckpointRoundDamage,
                         ::testing::Combine(::testing::Values(Shape{1, 1}, Shape{2, 2},
                                                              Shape{3, 4}),
                                            ::testing::ValuesIn(kFileDamages)),
                         [](const ::testing::TestParamInfo<DamageParam>& p) {
                           return std::string(std::get<1>(p.param).name) + "_" +
                                  std::to_string(std::get<0>(std::get<0>(p.param))) + "s" +
                                  std::to_string(std::get<1>(std::get<0>(p.param))) + "w";
                         });

}  // namespace
}  // namespace tandem::testing
