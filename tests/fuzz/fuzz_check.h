// FUZZ_CHECK(target, condition): a libFuzzer target's invariant. When it
// does not hold, the target prints "<target>: invariant violated: <condition>"
// (scripts/run-fuzzers.sh greps for it) and aborts, so libFuzzer saves the
// input.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace tandem::fuzz {

[[noreturn]] inline void InvariantViolated(const char* target, const char* condition) {
  std::fprintf(stderr, "%s: invariant violated: %s\n", target, condition);
  std::abort();
}

}  // namespace tandem::fuzz

#define FUZZ_CHECK(target, cond)                        \
  do {                                                  \
    if (!(cond)) {                                      \
      ::tandem::fuzz::InvariantViolated(target, #cond); \
    }                                                   \
  } while (false)
