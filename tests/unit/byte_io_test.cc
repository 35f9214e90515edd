#include "base/byte_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::base {
namespace {

using ::testing::HasSubstr;

enum class Color : uint16_t { kRed = 1, kBlue = 0xBEEF };

template <typename T>
class ByteIoRoundTripTest : public ::testing::Test {};

using FieldTypes = ::testing::Types<int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t,
                                    uint64_t, bool, Color>;
TYPED_TEST_SUITE(ByteIoRoundTripTest, FieldTypes);

template <typename T>
std::vector<T> Samples() {
  if constexpr (std::is_enum_v<T>) {
    return {T::kRed, T::kBlue};
  } else if constexpr (std::is_same_v<T, bool>) {
    return {false, true};
  } else {
    return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), T{0}, T{1},
            static_cast<T>(0x5A)};
  }
}

TYPED_TEST(ByteIoRoundTripTest, EveryValueComesBackInOrder) {
  const std::vector<TypeParam> values = Samples<TypeParam>();
  ByteWriter w;
  for (TypeParam v : values) w.Put(v);
  w.PutString("between");
  for (TypeParam v : values) w.Put(v);
  EXPECT_EQ(w.bytes().size(), 2 * values.size() * sizeof(TypeParam) + 4 + 7);

  ByteReader r(w.bytes(), "record");
  for (TypeParam v : values) EXPECT_EQ(r.Get<TypeParam>("first"), v);
  EXPECT_EQ(r.GetString("between"), "between");
  for (TypeParam v : values) EXPECT_EQ(r.Get<TypeParam>("second"), v);
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_NO_THROW(r.ExpectEnd());
}

TEST(ByteIoTest, IntegersAreLittleEndian) {
  ByteWriter w;
  w.Put(uint32_t{0x01020304});
  w.Put(int16_t{-2});
  EXPECT_EQ(w.bytes(), std::string("\x04\x03\x02\x01\xFE\xFF", 6));
}

TEST(ByteIoTest, StringsCarryAU32LengthAndRawBytes) {
  ByteWriter w;
  w.PutString(std::string("a\0b", 3));
  EXPECT_EQ(w.bytes(), std::string("\x03\x00\x00\x00"
                                   "a\0b",
                                   7));
  ByteReader r(w.bytes(), "record");
  EXPECT_EQ(r.GetString("s"), std::string("a\0b", 3));
}

TEST(ByteIoTest, RawBytesAndTake) {
  ByteWriter w;
  const std::byte raw[3] = {std::byte{9}, std::byte{8}, std::byte{7}};
  w.PutBytes(raw);
  w.Put(uint8_t{6});
  const std::string taken = w.Take();
  ByteReader r(taken, "record");
  const auto got = r.GetBytes(3, "raw");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], std::byte{9});
  EXPECT_EQ(got[2], std::byte{7});
  EXPECT_EQ(r.Get<uint8_t>("tail"), 6);
}

// ---- Truncation: every prefix of a record fails at the right field -------------

struct Field {
  const char* name;
  size_t end;  // offset just past the field in the full record
};

std::string EncodeRecord() {
  ByteWriter w;
  w.Put(uint8_t{1});           // "kind", ends at 1
  w.Put(uint32_t{77});         // "rank", ends at 5
  w.PutString("host-name");    // "host", 4 + 9 bytes, ends at 18
  w.Put(uint64_t{123456789});  // "stamp", ends at 26
  return w.Take();
}

const Field kFields[] = {{"kind", 1}, {"rank", 5}, {"host", 18}, {"stamp", 26}};

void DecodeRecord(std::string_view bytes) {
  ByteReader r(bytes, "node record");
  r.Get<uint8_t>("kind");
  r.Get<uint32_t>("rank");
  r.GetString("host");
  r.Get<uint64_t>("stamp");
  r.ExpectEnd();
}

class ByteIoTruncationTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ByteIoTruncationTest, NamesTheRecordAndTheFieldThatRanOut) {
  const std::string full = EncodeRecord();
  ASSERT_EQ(full.size(), 26u);
  const size_t cut = GetParam();
  const char* expected_field = nullptr;
  for (const Field& f : kFields) {
    if (cut < f.end) {
      expected_field = f.name;
      break;
    }
  }
  ASSERT_NE(expected_field, nullptr);
  try {
    DecodeRecord(std::string_view(full).substr(0, cut));
    FAIL() << "a " << cut << "-byte prefix decoded";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("node record"));
    EXPECT_THAT(e.what(), HasSubstr(std::string("'") + expected_field + "'"));
    EXPECT_THAT(e.what(), HasSubstr("truncated"));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPrefix, ByteIoTruncationTest, ::testing::Range<size_t>(0, 26));

TEST(ByteIoTest, FullRecordDecodesAndTrailingBytesAreAnError) {
  const std::string full = EncodeRecord();
  EXPECT_NO_THROW(DecodeRecord(full));
  try {
    DecodeRecord(full + "xy");
    FAIL() << "trailing bytes were accepted";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("2 unexpected trailing bytes"));
  }
}

// ---- String limits -------------------------------------------------------------

TEST(ByteIoTest, StringLongerThanItsLimitIsRejectedBeforeReading) {
  ByteWriter w;
  w.PutString("0123456789");
  {
    ByteReader r(w.bytes(), "hello");
    EXPECT_EQ(r.GetString("name", 10), "0123456789");
  }
  ByteReader r(w.bytes(), "hello");
  try {
    r.GetString("name", 9);
    FAIL() << "the limit was ignored";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("hello"));
    EXPECT_THAT(e.what(), HasSubstr("'name'"));
    EXPECT_THAT(e.what(), HasSubstr("claims 10 bytes, limit is 9"));
  }
}

TEST(ByteIoTest, HugeClaimedLengthFailsOnTheLimitNotOnAllocation) {
  ByteWriter w;
  w.Put(uint32_t{0xFFFFFFFF});
  w.Put(uint8_t{'x'});
  ByteReader r(w.bytes(), "hello");
  EXPECT_THROW(r.GetString("name"), ProtocolError);  // default limit 1 MiB

  ByteWriter within;
  within.Put(uint32_t{100});
  within.Put(uint8_t{'x'});
  ByteReader short_reader(within.bytes(), "hello");
  try {
    short_reader.GetString("name");
    FAIL() << "a 100-byte claim over 1 byte was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("need 100 bytes, 1 left"));
  }
}

// ---- bool fields -------------------------------------------------------------------

class ByteIoBoolTest : public ::testing::TestWithParam<int> {};

TEST_P(ByteIoBoolTest, OnlyZeroAndOneAreBools) {
  const auto byte = static_cast<uint8_t>(GetParam());
  ByteWriter w;
  w.Put(byte);
  ByteReader r(w.bytes(), "flags");
  if (byte <= 1) {
    EXPECT_EQ(r.Get<bool>("enabled"), byte == 1);
    return;
  }
  try {
    r.Get<bool>("enabled");
    FAIL() << "byte " << GetParam() << " was read as a bool";
  } catch (const ProtocolError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'enabled'"));
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(GetParam())));
  }
}

INSTANTIATE_TEST_SUITE_P(Bytes, ByteIoBoolTest, ::testing::Values(0, 1, 2, 0x80, 0xFF));

}  // namespace
}  // namespace tandem::base
