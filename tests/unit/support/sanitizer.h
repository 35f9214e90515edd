// Whether this test binary runs under a sanitizer that slows every
// instrumented step, so that tests with wall-clock patience can widen it.
#pragma once

namespace tandem::testing {

#if defined(__SANITIZE_THREAD__)
/// True when built with ThreadSanitizer (g++ or clang).
inline constexpr bool kUnderTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif
#else
inline constexpr bool kUnderTsan = false;
#endif

}  // namespace tandem::testing
