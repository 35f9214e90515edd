// The checkpoint file format (docs/checkpoints.md, "File format"): every
// kind of file round-trips for every dtype and key count, and every kind of
// damage is refused with the file named and the fault said.
#include "kv/checkpoint_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <tuple>

#include "net/crc32c.h"
#include "tandem/error.h"
#include "typed_values.h"

namespace tandem::testing {
namespace {

using kv::CheckpointKind;
using kv::ServerCheckpoint;
using kv::WorkerCheckpoint;

// A server checkpoint of `keys` keys of `dtype`: key k (numbered 3k+1) is a
// slice of (k+1)*4 elements at offset 4 of a 4-row-wide array, element i
// holding k*10+i.
ServerCheckpoint MakeServer(DType dtype, int keys, bool optimizer) {
  ServerCheckpoint c;
  c.header.round = 77;
  c.header.rank = 1;
  c.header.ranks = 3;
  if (optimizer) {
    c.optimizer_name = "sgd";
    c.optimizer_states = std::string("states\0with\0zeros", 17);
  }
  for (int k = 0; k < keys; ++k) {
    kv::SavedKey s;
    s.key = static_cast<uint64_t>(3 * k + 1);
    s.dtype = dtype;
    s.count = static_cast<uint64_t>(k + 1) * 4;
    s.offset = 4;
    s.total_elements = s.count + 8;
    s.row_length = 4;
    Tensor t(dtype, {static_cast<int64_t>(s.count)}, [&](size_t i) { return k * 10.0 + i; });
    s.value.assign(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
    c.keys.push_back(std::move(s));
  }
  return c;
}

using FormatParam = std::tuple<DType, int>;
class CheckpointFormat : public ::testing::TestWithParam<FormatParam> {};

TEST_P(CheckpointFormat, ServerShardRoundTrips) {
  const DType dtype = std::get<0>(GetParam());
  const int keys = std::get<1>(GetParam());
  for (bool optimizer : {false, true}) {
    const ServerCheckpoint c = MakeServer(dtype, keys, optimizer);
    const std::string bytes = kv::EncodeServerCheckpoint(c);
    const ServerCheckpoint d = kv::DecodeServerCheckpoint(bytes, "s.ckpt");
    EXPECT_EQ(d.header.kind, CheckpointKind::kServer);
    EXPECT_EQ(d.header.round, 77u);
    EXPECT_EQ(d.header.rank, 1u);
    EXPECT_EQ(d.header.ranks, 3u);
    EXPECT_EQ(d.optimizer_name, c.optimizer_name);
    EXPECT_EQ(d.optimizer_states, c.optimizer_states);
    ASSERT_EQ(d.keys.size(), static_cast<size_t>(keys));
    for (int k = 0; k < keys; ++k) {
      const kv::SavedKey& s = d.keys[static_cast<size_t>(k)];
      EXPECT_EQ(s.key, static_cast<uint64_t>(3 * k + 1));
      EXPECT_EQ(s.dtype, dtype);
      EXPECT_EQ(s.count, static_cast<uint64_t>(k + 1) * 4);
      EXPECT_EQ(s.total_elements, s.count + 8);
      EXPECT_EQ(s.offset, 4u);
      EXPECT_EQ(s.row_length, 4u);
      for (size_t i = 0; i < s.count; ++i) ASSERT_EQ(GetAt(dtype, s.value.data(), i), k * 10.0 + i);
    }
    // The envelope: 32-byte header, body, CRC32C of everything before it.
    uint32_t crc;
    std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
    EXPECT_EQ(crc, net::Crc32c(std::as_bytes(std::span(bytes.data(), bytes.size() - 4))));
    EXPECT_EQ(bytes.substr(0, 4), "TDCK");
  }
}

TEST_P(CheckpointFormat, WorkerStateRoundTrips) {
  const int keys = std::get<1>(GetParam());
  WorkerCheckpoint c;
  c.header.round = 5;
  c.header.rank = 0;
  c.header.ranks = 2;
  c.user_state = std::string(static_cast<size_t>(keys) * 3, '\x7f');
  for (int k = 0; k < keys; ++k) {
    c.residuals.push_back({static_cast<uint64_t>(k), std::vector<float>(k + 1, 0.25f * k)});
  }
  const WorkerCheckpoint d = kv::DecodeWorkerCheckpoint(kv::EncodeWorkerCheckpoint(c), "w.ckpt");
  EXPECT_EQ(d.header.kind, CheckpointKind::kWorker);
  EXPECT_EQ(d.header.round, 5u);
  EXPECT_EQ(d.header.ranks, 2u);
  EXPECT_EQ(d.user_state, c.user_state);
  ASSERT_EQ(d.residuals.size(), c.residuals.size());
  for (size_t k = 0; k < c.residuals.size(); ++k) {
    EXPECT_EQ(d.residuals[k].key, c.residuals[k].key);
    EXPECT_EQ(d.residuals[k].values, c.residuals[k].values);
  }
}

TEST_P(CheckpointFormat, ManifestRoundTrips) {
  const int files = std::get<1>(GetParam());
  kv::CheckpointManifest m;
  m.header.round = 9;
  m.header.ranks = 4;
  m.num_servers = 2;
  m.num_workers = 4;
  for (int i = 0; i < files; ++i) {
    m.files.push_back(
        {"f" + std::to_string(i), static_cast<uint64_t>(i) * 100, static_cast<uint32_t>(i) * 7});
  }
  const kv::CheckpointManifest d = kv::DecodeManifest(kv::EncodeManifest(m), "MANIFEST");
  EXPECT_EQ(d.header.kind, CheckpointKind::kManifest);
  EXPECT_EQ(d.num_servers, 2u);
  EXPECT_EQ(d.num_workers, 4u);
  ASSERT_EQ(d.files.size(), m.files.size());
  for (size_t i = 0; i < m.files.size(); ++i) {
    EXPECT_EQ(d.files[i].name, m.files[i].name);
    EXPECT_EQ(d.files[i].size, m.files[i].size);
    EXPECT_EQ(d.files[i].crc32c, m.files[i].crc32c);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypesAndKeys, CheckpointFormat,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF64, DType::kF16,
                                                              DType::kI32, DType::kI64),
                                            ::testing::Values(0, 1, 7)));

// A kind of damage: what it does to a valid file, and what the error says.
struct Damage {
  const char* name;
  std::function<void(std::string&)> apply;
  const char* says;
};

std::string Recrc(std::string bytes) {
  const uint32_t crc = net::Crc32c(std::as_bytes(std::span(bytes.data(), bytes.size() - 4)));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  return bytes;
}

const Damage kDamages[] = {
    {"empty", [](std::string& b) { b.clear(); }, "truncated: 0 bytes"},
    {"header cut", [](std::string& b) { b.resize(20); }, "truncated: 20 bytes"},
    {"body cut", [](std::string& b) { b.resize(b.size() - 9); }, "truncated"},
    {"trailing bytes", [](std::string& b) { b += "xx"; }, "trailing bytes"},
    {"flipped body bit", [](std::string& b) { b[40] ^= 0x10; }, "checksum mismatch"},
    {"flipped crc bit", [](std::string& b) { b[b.size() - 1] ^= 1; }, "checksum mismatch"},
    {"bad magic", [](std::string& b) { b[0] = 'X'; }, "bad magic"},
    {"newer version", [](std::string& b) { b[4] = 2; }, "version 2"},
    {"unknown kind", [](std::string& b) { b[6] = 9; }, "unknown kind 9"},
    {"other kind", [](std::string& b) { b[6] = 2, b = Recrc(b); }, "expected a server shard"},
    {"rank beyond ranks", [](std::string& b) { b[16] = 3, b = Recrc(b); }, "rank 3 is not below"},
    {"zero ranks", [](std::string& b) { std::memset(&b[20], 0, 4), b = Recrc(b); },
     "count of ranks 0"},
    // The first key's row length (at body offset 1 + 4+3 + 8+17 + 8 + 8+1+8+8+8)
    // set to 3, which does not divide the slice: a consistent checksum, a
    // body that lies.
    {"inconsistent body",
     [](std::string& b) {
       const size_t at = 32 + 1 + 7 + 25 + 8 + 8 + 1 + 8 + 8 + 8;
       b[at] = 3;
       b = Recrc(b);
     },
     "row length 3 does not divide"},
};

class CheckpointDamage : public ::testing::TestWithParam<Damage> {};

TEST_P(CheckpointDamage, IsRefusedNamingTheFileAndTheFault) {
  const Damage& d = GetParam();
  std::string bytes = kv::EncodeServerCheckpoint(MakeServer(DType::kF32, 2, true));
  d.apply(bytes);
  try {
    kv::DecodeServerCheckpoint(bytes, "/ckpt/round-4/server-1.ckpt");
    FAIL() << d.name << ": accepted";
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint file /ckpt/round-4/server-1.ckpt: "), std::string::npos)
        << what;
    EXPECT_NE(what.find(d.says), std::string::npos) << d.name << ": " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, CheckpointDamage, ::testing::ValuesIn(kDamages),
                         [](const ::testing::TestParamInfo<Damage>& p) {
                           std::string name = p.param.name;
                           for (char& c : name) {
                             if (c == ' ') c = '_';
                           }
                           return name;
                         });

// Every prefix of a valid file is refused (never read past its end).
TEST(CheckpointFormatPrefixes, EveryTruncationIsRefused) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const std::string bytes = kv::EncodeServerCheckpoint(MakeServer(dtype, 3, true));
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_THROW(kv::DecodeServerCheckpoint(bytes.substr(0, n), "f"), IoError) << n;
    }
  }
}

}  // namespace
}  // namespace tandem::testing
