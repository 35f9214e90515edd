// Encoding of the framework engine's cycle message
// (docs/protocol-collective.md, "Framework engine").
#include "collective/negotiation_message.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>

#include "base/byte_io.h"
#include "base/dtype.h"
#include "tandem/error.h"

namespace tandem::collective {

std::string TensorRequest::Describe() const {
  std::string s =
      fmt::format("{} {}[{}]", kind == RequestKind::kAllReduce ? "allreduce" : "broadcast",
                  base::DTypeName(dtype), fmt::join(shape, ","));
  if (kind == RequestKind::kAllReduce) {
    s += " " + ReductionName(op);
    if (prescale != 1.0 || postscale != 1.0) {
      s += fmt::format(" prescale {} postscale {}", prescale, postscale);
    }
    if (algorithm != AllReduceAlgorithm::kAuto)
      s += " algorithm " + AllReduceAlgorithmName(algorithm);
  } else {
    s += fmt::format(" root {}", root);
  }
  return s;
}

std::string EngineSettings::Describe() const {
  return fmt::format("fusion threshold {} B, cycle time {} ms, algorithm {}", fusion_threshold,
                     static_cast<double>(cycle_time.count()) / 1000.0,
                     AllReduceAlgorithmName(algorithm));
}

std::string CycleMessage::Encode() const {
  base::ByteWriter w;
  w.Put(static_cast<uint8_t>(stopping ? 1 : 0));
  w.Put(clock_ms);
  w.Put(static_cast<uint64_t>(settings.fusion_threshold));
  w.Put(static_cast<uint32_t>(settings.cycle_time.count()));
  w.Put(static_cast<uint8_t>(settings.algorithm));
  w.Put(cache_capacity);
  w.Put(static_cast<uint32_t>(cached.size()));
  for (size_t i = 0; i < cached.size(); i += 8) {
    uint8_t byte = 0;
    for (size_t b = 0; b < 8 && i + b < cached.size(); ++b) {
      if (cached[i + b]) byte = static_cast<uint8_t>(byte | (1u << b));
    }
    w.Put(byte);
  }
  w.Put(static_cast<uint32_t>(requests.size()));
  for (const TensorRequest& r : requests) {
    w.PutString(r.name);
    w.Put(static_cast<uint8_t>(r.kind));
    w.Put(static_cast<uint8_t>(r.dtype));
    w.Put(static_cast<uint32_t>(r.shape.size()));
    for (int64_t d : r.shape) w.Put(d);
    w.Put(static_cast<uint8_t>(r.op));
    w.Put(r.root);
    w.Put(std::bit_cast<uint64_t>(r.prescale));
    w.Put(std::bit_cast<uint64_t>(r.postscale));
    w.Put(static_cast<uint8_t>(r.algorithm));
  }
  return w.Take();
}

CycleMessage CycleMessage::Decode(std::string_view bytes) {
  base::ByteReader r(bytes, "framework engine cycle message");
  CycleMessage m;
  m.stopping = r.Get<bool>("stopping");
  m.clock_ms = r.Get<int64_t>("clock");
  const auto threshold = r.Get<uint64_t>("fusion threshold");
  if (threshold > kMaxFusionThreshold) {
    throw ProtocolError(
        fmt::format("framework engine cycle message: fusion threshold {} bytes, limit is {}",
                    threshold, kMaxFusionThreshold));
  }
  m.settings.fusion_threshold = static_cast<size_t>(threshold);
  const auto cycle_us = r.Get<uint32_t>("cycle time");
  if (cycle_us > kMaxCycleTimeUs) {
    throw ProtocolError(fmt::format("framework engine cycle message: cycle time {} us, limit is {}",
                                    cycle_us, kMaxCycleTimeUs));
  }
  m.settings.cycle_time = std::chrono::microseconds(cycle_us);
  const auto setting_algorithm = r.Get<uint8_t>("settings' algorithm");
  if (setting_algorithm > static_cast<uint8_t>(AllReduceAlgorithm::kHierarchical)) {
    throw ProtocolError(fmt::format("framework engine cycle message: the settings' algorithm is {}",
                                    setting_algorithm));
  }
  m.settings.algorithm = static_cast<AllReduceAlgorithm>(setting_algorithm);
  m.cache_capacity = r.Get<uint32_t>("cache capacity");
  if (m.cache_capacity > kMaxCacheBits) {
    throw ProtocolError(
        fmt::format("framework engine cycle message: cache capacity {}, limit is {}",
                    m.cache_capacity, kMaxCacheBits));
  }
  const auto bits = r.Get<uint32_t>("cache bits");
  if (bits > kMaxCacheBits) {
    throw ProtocolError(fmt::format("framework engine cycle message: {} cache bits, limit is {}",
                                    bits, kMaxCacheBits));
  }
  auto bitmap = r.GetBytes((bits + 7) / 8, "cache bitmap");
  m.cached.resize(bits);
  for (uint32_t i = 0; i < bits; ++i) {
    m.cached[i] = (static_cast<uint8_t>(bitmap[i / 8]) >> (i % 8)) & 1u;
  }
  if (bits % 8 != 0 && (static_cast<uint8_t>(bitmap[bits / 8]) >> (bits % 8)) != 0) {
    throw ProtocolError(
        "framework engine cycle message: cache bitmap has bits set past its length");
  }
  const auto count = r.Get<uint32_t>("request count");
  if (count > kMaxRequests) {
    throw ProtocolError(fmt::format("framework engine cycle message: {} requests, limit is {}",
                                    count, kMaxRequests));
  }
  for (uint32_t i = 0; i < count; ++i) {
    TensorRequest q;
    q.name = r.GetString("name", kMaxNameBytes);
    const auto kind = r.Get<uint8_t>("kind");
    if (kind > static_cast<uint8_t>(RequestKind::kBroadcast)) {
      throw ProtocolError(
          fmt::format("framework engine cycle message: request '{}' has kind {} (0 allreduce, "
                      "1 broadcast)",
                      q.name, kind));
    }
    q.kind = static_cast<RequestKind>(kind);
    q.dtype = base::DTypeFromWire(r.Get<uint8_t>("dtype"));
    const auto dims = r.Get<uint32_t>("dims");
    if (dims > kMaxDims) {
      throw ProtocolError(
          fmt::format("framework engine cycle message: request '{}' has {} dimensions, limit is {}",
                      q.name, dims, kMaxDims));
    }
    for (uint32_t d = 0; d < dims; ++d) {
      const auto v = r.Get<int64_t>("dimension");
      if (v < 0 || v > (int64_t{1} << 48)) {
        throw ProtocolError(fmt::format(
            "framework engine cycle message: request '{}' has dimension {}", q.name, v));
      }
      q.shape.push_back(v);
    }
    const auto op = r.Get<uint8_t>("reduction");
    if (op > static_cast<uint8_t>(Reduction::kProd)) {
      throw ProtocolError(
          fmt::format("framework engine cycle message: request '{}' has reduction {}", q.name, op));
    }
    q.op = static_cast<Reduction>(op);
    q.root = r.Get<int32_t>("root");
    q.prescale = std::bit_cast<double>(r.Get<uint64_t>("prescale"));
    q.postscale = std::bit_cast<double>(r.Get<uint64_t>("postscale"));
    const auto algorithm = r.Get<uint8_t>("algorithm");
    if (algorithm > static_cast<uint8_t>(AllReduceAlgorithm::kHierarchical)) {
      throw ProtocolError(fmt::format(
          "framework engine cycle message: request '{}' has algorithm {}", q.name, algorithm));
    }
    q.algorithm = static_cast<AllReduceAlgorithm>(algorithm);
    m.requests.push_back(std::move(q));
  }
  r.ExpectEnd();
  return m;
}

}  // namespace tandem::collective
