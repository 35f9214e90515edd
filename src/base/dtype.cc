#include "base/dtype.h"

#include <fmt/format.h>

#include <array>

#include "tandem/error.h"

namespace tandem::base {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

// Indexed by wire value; the static_asserts below keep index and value equal.
constexpr std::array<DTypeInfo, kDTypeCount> kDTypes = {{
    {DType::kF32, "float32", 4},
    {DType::kF64, "float64", 8},
    {DType::kF16, "float16", 2},
    {DType::kBF16, "bfloat16", 2},
    {DType::kI32, "int32", 4},
    {DType::kI64, "int64", 8},
    {DType::kU8, "uint8", 1},
}};

constexpr bool TableMatchesWireValues() {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableMatchesWireValues(), "kDTypes must be ordered by wire value");

const DTypeInfo& Info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  if (index >= kDTypes.size()) detail::ThrowBadDType(dtype);
  return kDTypes[index];
}

}  // namespace

namespace detail {
void ThrowBadDType(DType dtype) {
  throw InvalidArgument(fmt::format("dtype value {} is not a DType (expected 0..{})",
                                    static_cast<unsigned>(dtype), kDTypeCount - 1));
}
}  // namespace detail

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

DType ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  std::string accepted;
  for (const DTypeInfo& info : kDTypes) {
    if (!accepted.empty()) accepted += ", ";
    accepted += info.name;
  }
  throw InvalidArgument(fmt::format("unknown dtype '{}' (expected one of {})", name, accepted));
}

DType DTypeFromWire(uint8_t value) {
  if (value >= kDTypeCount) {
    throw ProtocolError(fmt::format("dtype wire value {} is unknown (expected 0..{})",
                                    static_cast<unsigned>(value), kDTypeCount - 1));
  }
  return static_cast<DType>(value);
}

bool IsFloatingPoint(DType dtype) {
  switch (Info(dtype).dtype) {
    case DType::kF32:
    case DType::kF64:
    case DType::kF16:
    case DType::kBF16:
      return true;
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
      return false;
  }
  detail::ThrowBadDType(dtype);
}

}  // namespace tandem::base
