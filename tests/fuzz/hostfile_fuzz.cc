// libFuzzer target: arbitrary text through the hostfile parser
// (docs/launch.md, "Hostfiles"), which reads a file a user wrote. An
// InvalidArgument is a correct answer; a crash, a sanitizer report, or a
// parsed host list that breaks ParseHostfile's promises (a host, at least
// one slot, each login once) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "launch/hostfile.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto hosts = tandem::launch::ParseHostfile(text, "fuzzed hostfile");
    std::set<std::string> seen;
    for (const auto& h : hosts) {
      if (h.host.empty() || h.login.empty() || h.slots < 1) std::abort();
      if (!std::string_view(h.login).ends_with(h.host)) std::abort();  // [user@]host
      if (!seen.insert(h.login).second) std::abort();
    }
  } catch (const tandem::InvalidArgument&) {
  }
  return 0;
}
