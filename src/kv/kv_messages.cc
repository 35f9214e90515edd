// Encoding of the parameter server's metadata (docs/protocol-ps.md).
#include "kv/kv_messages.h"

#include <fmt/format.h>

#include <bit>

#include "base/byte_io.h"
#include "base/dtype.h"
#include "tandem/error.h"

namespace tandem::kv {
namespace {

// Limits of what a decoder accepts (docs/protocol-ps.md, "Limits").
constexpr uint32_t kMaxRows = 1u << 26;
constexpr uint32_t kMaxParams = 256;
constexpr uint32_t kMaxText = 1u << 16;
constexpr uint32_t kMaxPath = 4096;

}  // namespace

std::string KvMessageName(uint16_t type) {
  switch (type) {
    case kvmsg::kInit:
      return "init";
    case kvmsg::kPush:
      return "push";
    case kvmsg::kPull:
      return "pull";
    case kvmsg::kPushPull:
      return "push-pull";
    case kvmsg::kRowSparsePull:
      return "row-sparse pull";
    case kvmsg::kSetOptimizer:
      return "set-optimizer";
    case kvmsg::kSaveOptimizerStates:
      return "save-optimizer-states";
    case kvmsg::kLoadOptimizerStates:
      return "load-optimizer-states";
    case kvmsg::kCheckpoint:
      return "checkpoint";
    case kvmsg::kCheckpointOutcome:
      return "checkpoint-outcome";
    case kvmsg::kCheckpointQuery:
      return "checkpoint-query";
    case kvmsg::kReceipt:
      return "receipt";
    default:
      return fmt::format("kv message {}", type);
  }
}

std::string KeyRequest::Encode() const {
  base::ByteWriter w;
  w.Put(kVersion);
  w.Put(key);
  w.Put(worker_rank);
  w.Put(static_cast<uint8_t>(dtype));
  w.Put(static_cast<uint8_t>(mode));
  w.Put(total_elements);
  w.Put(offset);
  w.Put(count);
  w.Put(row_length);
  w.Put(static_cast<uint8_t>(encoding));
  w.Put(std::bit_cast<uint32_t>(threshold));
  w.Put(priority);
  w.Put(static_cast<uint32_t>(rows.size()));
  for (uint64_t r : rows) w.Put(r);
  return w.Take();
}

KeyRequest KeyRequest::Decode(std::string_view meta) {
  base::ByteReader r(meta, "kv key request");
  KeyRequest q;
  auto version = r.Get<uint8_t>("version");
  if (version != kVersion) {
    throw ProtocolError(
        fmt::format("kv key request: version {} (this node speaks {})", version, kVersion));
  }
  q.key = r.Get<uint64_t>("key");
  q.worker_rank = r.Get<int32_t>("worker_rank");
  q.dtype = base::DTypeFromWire(r.Get<uint8_t>("dtype"));
  auto mode = r.Get<uint8_t>("mode");
  if (mode > 1) throw ProtocolError(fmt::format("kv key request: mode {} is unknown", mode));
  q.mode = static_cast<UpdateMode>(mode);
  q.total_elements = r.Get<uint64_t>("total_elements");
  q.offset = r.Get<uint64_t>("offset");
  q.count = r.Get<uint64_t>("count");
  q.row_length = r.Get<uint64_t>("row_length");
  auto enc = r.Get<uint8_t>("encoding");
  if (enc >= kPayloadEncodingCount) {
    throw ProtocolError(fmt::format("kv key request: encoding {} is unknown", enc));
  }
  q.encoding = static_cast<PayloadEncoding>(enc);
  q.threshold = std::bit_cast<float>(r.Get<uint32_t>("threshold"));
  q.priority = r.Get<int32_t>("priority");
  auto nrows = r.Get<uint32_t>("row count");
  if (nrows > kMaxRows) {
    throw ProtocolError(
        fmt::format("kv key request: {} rows exceed the limit {}", nrows, kMaxRows));
  }
  if (static_cast<size_t>(nrows) * 8 > r.remaining()) {
    throw ProtocolError(
        fmt::format("kv key request: {} rows claimed, {} bytes left", nrows, r.remaining()));
  }
  q.rows.reserve(nrows);
  for (uint32_t i = 0; i < nrows; ++i) q.rows.push_back(r.Get<uint64_t>("row"));
  r.ExpectEnd();

  if (q.worker_rank < 0) {
    throw ProtocolError(fmt::format("kv key request: worker rank {} is negative", q.worker_rank));
  }
  if (q.offset > q.total_elements || q.count > q.total_elements - q.offset) {
    throw ProtocolError(fmt::format(
        "kv key request for key {}: slice [{}, +{}) lies outside the array of {} elements", q.key,
        q.offset, q.count, q.total_elements));
  }
  if (q.row_length == 0 || q.offset % q.row_length != 0 || q.count % q.row_length != 0) {
    throw ProtocolError(fmt::format(
        "kv key request for key {}: row length {} does not divide offset {} and count {}", q.key,
        q.row_length, q.offset, q.count));
  }
  const uint64_t first_row = q.offset / q.row_length;
  const uint64_t end_row = first_row + q.count / q.row_length;
  for (size_t i = 0; i < q.rows.size(); ++i) {
    if (q.rows[i] < first_row || q.rows[i] >= end_row) {
      throw ProtocolError(
          fmt::format("kv key request for key {}: row {} outside this slice's rows [{}, {})", q.key,
                      q.rows[i], first_row, end_row));
    }
    if (i > 0 && q.rows[i] <= q.rows[i - 1]) {
      throw ProtocolError(fmt::format(
          "kv key request for key {}: rows not strictly ascending at {}", q.key, q.rows[i]));
    }
  }
  const bool compressed =
      q.encoding == PayloadEncoding::kOneBit || q.encoding == PayloadEncoding::kTwoBit;
  if (compressed && q.dtype != DType::kF32) {
    throw ProtocolError(fmt::format("kv key request for key {}: compressed push of a {} key", q.key,
                                    base::DTypeName(q.dtype)));
  }
  return q;
}

uint64_t KeyRequest::ExpectedPushBytes() const {
  const uint64_t elem = ElementSize(dtype);
  switch (encoding) {
    case PayloadEncoding::kDense:
      return count * elem;
    // MXNet's formats: 16 two-bit codes or 32 one-bit codes per 32-bit word
    // (docs/gradient-compression.md).
    case PayloadEncoding::kTwoBit:
      return (count + 15) / 16 * 4;
    case PayloadEncoding::kOneBit:
      return (count + 31) / 32 * 4;
    case PayloadEncoding::kRowSparse:
      return rows.size() * row_length * elem;
  }
  return 0;
}

std::string OptimizerCommand::Encode() const {
  base::ByteWriter w;
  w.PutString(name);
  w.Put(static_cast<uint32_t>(params.size()));
  for (const auto& [k, v] : params) {
    w.PutString(k);
    w.PutString(v);
  }
  return w.Take();
}

OptimizerCommand OptimizerCommand::Decode(std::string_view meta) {
  base::ByteReader r(meta, "set-optimizer command");
  OptimizerCommand c;
  c.name = r.GetString("name", kMaxText);
  auto n = r.Get<uint32_t>("parameter count");
  if (n > kMaxParams) {
    throw ProtocolError(
        fmt::format("set-optimizer command: {} parameters exceed the limit {}", n, kMaxParams));
  }
  for (uint32_t i = 0; i < n; ++i) {
    auto k = r.GetString("parameter name", kMaxText);
    auto v = r.GetString("parameter value", kMaxText);
    c.params.emplace_back(std::move(k), std::move(v));
  }
  r.ExpectEnd();
  return c;
}

std::string StatesCommand::Encode() const {
  base::ByteWriter w;
  w.PutString(path);
  return w.Take();
}

StatesCommand StatesCommand::Decode(std::string_view meta) {
  base::ByteReader r(meta, "optimizer states command");
  StatesCommand c;
  c.path = r.GetString("path", kMaxPath);
  r.ExpectEnd();
  if (c.path.empty()) throw ProtocolError("optimizer states command: empty path");
  return c;
}

std::string CheckpointCommand::Encode() const {
  base::ByteWriter w;
  w.Put(static_cast<uint8_t>(phase));
  w.PutString(dir);
  w.Put(round);
  return w.Take();
}

CheckpointCommand CheckpointCommand::Decode(std::string_view meta) {
  base::ByteReader r(meta, "checkpoint command");
  CheckpointCommand c;
  const auto phase = r.Get<uint8_t>("phase");
  if (phase > 3) throw ProtocolError(fmt::format("checkpoint command: phase {} is unknown", phase));
  c.phase = static_cast<Phase>(phase);
  c.dir = r.GetString("dir", kMaxPath);
  c.round = r.Get<uint64_t>("round");
  r.ExpectEnd();
  if (c.dir.empty()) throw ProtocolError("checkpoint command: empty dir");
  return c;
}

std::string CheckpointOutcome::Encode() const {
  base::ByteWriter w;
  w.Put(found);
  w.Put(round);
  w.PutString(error);
  return w.Take();
}

CheckpointOutcome CheckpointOutcome::Decode(std::string_view meta) {
  base::ByteReader r(meta, "checkpoint outcome");
  CheckpointOutcome o;
  o.found = r.Get<bool>("found");
  o.round = r.Get<uint64_t>("round");
  o.error = r.GetString("error", kMaxText);
  r.ExpectEnd();
  return o;
}

std::string Receipt::Encode() const {
  base::ByteWriter w;
  w.Put(static_cast<uint8_t>(state));
  return w.Take();
}

Receipt Receipt::Decode(std::string_view meta) {
  base::ByteReader r(meta, "kv receipt");
  Receipt o;
  const auto state = r.Get<uint8_t>("state");
  if (state > static_cast<uint8_t>(State::kParked)) {
    throw ProtocolError(
        fmt::format("kv receipt: state: expected 0 (merged) or 1 (parked), got {}", state));
  }
  o.state = static_cast<State>(state);
  r.ExpectEnd();
  return o;
}

std::string ErrorReply::Encode() const {
  base::ByteWriter w;
  w.Put(static_cast<uint8_t>(kind));
  w.PutString(text);
  return w.Take();
}

ErrorReply ErrorReply::Decode(std::string_view meta) {
  try {
    base::ByteReader r(meta, "kv error reply");
    ErrorReply e;
    auto kind = r.Get<uint8_t>("kind");
    e.kind = kind <= 2 ? static_cast<ErrorKind>(kind) : ErrorKind::kOther;
    e.text = r.GetString("text", kMaxText);
    r.ExpectEnd();
    return e;
  } catch (const ProtocolError& x) {
    return {ErrorKind::kProtocol, fmt::format("undecodable error reply: {}", x.what())};
  }
}

void ErrorReply::Throw(std::string_view context) const {
  std::string what = context.empty() ? text : fmt::format("{}: {}", context, text);
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      throw InvalidArgument(what);
    case ErrorKind::kProtocol:
      throw ProtocolError(what);
    case ErrorKind::kOther:
      break;
  }
  throw Error(what);
}

}  // namespace tandem::kv
