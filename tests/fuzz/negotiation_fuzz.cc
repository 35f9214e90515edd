// libFuzzer target: arbitrary bytes through the framework engine's cycle
// message decoder (docs/protocol-collective.md, "Framework engine"). A
// ProtocolError is a correct answer; a crash, a sanitizer report, or a
// decoded message that does not encode to the same bytes is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "collective/negotiation_message.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tandem::collective::CycleMessage;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    CycleMessage m = CycleMessage::Decode(bytes);
    for (const auto& q : m.requests) (void)q.Describe();
    if (m.Encode() != bytes) std::abort();
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
