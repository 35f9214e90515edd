#include "base/dtype_convert.h"

#include <fmt/format.h>

#include "tandem/error.h"

namespace tandem::base {

namespace {

bool IsWide(DType d) { return d == DType::kF32 || d == DType::kF64; }
bool IsNarrow(DType d) { return d == DType::kF16 || d == DType::kBF16; }

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename From, typename To>
void Loop(const void* src, void* dst, size_t count) {
  const auto* in = static_cast<const From*>(src);
  auto* out = static_cast<To*>(dst);
  for (size_t i = 0; i < count; ++i) {
    if constexpr (kIs16<To> && kIs16<From>) {
      out[i] = Narrow<To>(Widen(in[i]));  // never called: CanConvert refuses it
    } else if constexpr (kIs16<To>) {
      // A float64 is rounded to float first.
      out[i] = Narrow<To>(static_cast<float>(in[i]));
    } else if constexpr (kIs16<From>) {
      out[i] = static_cast<To>(Widen(in[i]));
    } else {
      out[i] = static_cast<To>(in[i]);
    }
  }
}

template <typename From>
void ToAny(DType to, const void* src, void* dst, size_t count) {
  switch (to) {
    case DType::kF32:
      return Loop<From, float>(src, dst, count);
    case DType::kF64:
      return Loop<From, double>(src, dst, count);
    case DType::kF16:
      return Loop<From, Half>(src, dst, count);
    case DType::kBF16:
      return Loop<From, BFloat16>(src, dst, count);
    default:
      return;  // refused by CanConvert
  }
}

}  // namespace

bool CanConvert(DType from, DType to) {
  return (IsWide(from) && IsNarrow(to)) || (IsNarrow(from) && IsWide(to)) ||
         (IsWide(from) && IsWide(to) && from != to);
}

void Convert(DType from, const void* src, DType to, void* dst, size_t count) {
  if (!CanConvert(from, to)) {
    throw InvalidArgument(
        fmt::format("cannot convert {} to {}: tandem converts float32 and "
                    "float64 to and from float16 and bfloat16",
                    DTypeName(from), DTypeName(to)));
  }
  switch (from) {
    case DType::kF32:
      return ToAny<float>(to, src, dst, count);
    case DType::kF64:
      return ToAny<double>(to, src, dst, count);
    case DType::kF16:
      return ToAny<Half>(to, src, dst, count);
    case DType::kBF16:
      return ToAny<BFloat16>(to, src, dst, count);
    default:
      return;
  }
}

}  // namespace tandem::base
