// Little-endian, bounds-checked encoding of small records (message metadata,
// node tables, handshakes).
//
// ByteReader never trusts a length it reads: every read checks the bytes
// left first and throws tandem::ProtocolError naming the field and what was
// missing, so a decoder built on it survives any byte string.
#pragma once

#include <fmt/format.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "tandem/error.h"

namespace tandem::base {

static_assert(std::endian::native == std::endian::little,
              "tandem's wire encoding assumes a little-endian host");

/// Appends fields to a growing byte string.
class ByteWriter {
 public:
  /// Makes room for `bytes` in all, so that the writes below do not grow
  /// the buffer one step at a time.
  void Reserve(size_t bytes) { out_.reserve(bytes); }
  /// Appends an integer or enum in little-endian order.
  template <typename T>
  requires std::is_integral_v<T> || std::is_enum_v<T>
  void Put(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_.append(bytes, sizeof(T));
  }
  /// Appends a string as a u32 length followed by its bytes.
  void PutString(std::string_view s) {
    Put(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  /// Appends raw bytes without a length.
  void PutBytes(std::span<const std::byte> bytes) {
    out_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  /// The bytes written so far.
  const std::string& bytes() const { return out_; }
  /// Moves the bytes out.
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

/// Reads fields from a byte span, checking bounds before every read.
class ByteReader {
 public:
  /// `what` names the record in error messages ("node table").
  ByteReader(std::span<const std::byte> bytes, std::string_view what)
      : bytes_(bytes), what_(what) {}
  ByteReader(std::string_view bytes, std::string_view what)
      : ByteReader(std::as_bytes(std::span(bytes.data(), bytes.size())), what) {}

  /// Reads an integer or enum; `field` names it in the error. A bool must be
  /// the byte 0 or 1: any other byte would be an invalid bool object.
  template <typename T>
  requires std::is_integral_v<T> || std::is_enum_v<T> T Get(std::string_view field) {
    if constexpr (std::is_same_v<T, bool>) {
      const auto byte = Get<uint8_t>(field);
      if (byte > 1) {
        throw ProtocolError(fmt::format("{}: field '{}' is a bool but holds {} (expected 0 or 1)",
                                        what_, field, static_cast<unsigned>(byte)));
      }
      return byte == 1;
    } else {
      Need(sizeof(T), field);
      T value;
      std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
      pos_ += sizeof(T);
      return value;
    }
  }
  /// Reads a u32-length-prefixed string of at most `max_len` bytes.
  std::string GetString(std::string_view field, uint32_t max_len = 1u << 20) {
    auto len = Get<uint32_t>(field);
    if (len > max_len) {
      throw ProtocolError(
          fmt::format("{}: field '{}' claims {} bytes, limit is {}", what_, field, len, max_len));
    }
    Need(len, field);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  /// Reads `n` raw bytes.
  std::span<const std::byte> GetBytes(size_t n, std::string_view field) {
    Need(n, field);
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  /// Bytes not yet read.
  size_t remaining() const { return bytes_.size() - pos_; }
  /// Throws unless every byte was consumed (trailing garbage is an error).
  void ExpectEnd() const {
    if (remaining() != 0) {
      throw ProtocolError(fmt::format("{}: {} unexpected trailing bytes", what_, remaining()));
    }
  }

 private:
  void Need(size_t n, std::string_view field) const {
    if (n > remaining()) {
      throw ProtocolError(fmt::format("{}: truncated at field '{}' (need {} bytes, {} left)", what_,
                                      field, n, remaining()));
    }
  }

  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
  std::string_view what_;
};

}  // namespace tandem::base
