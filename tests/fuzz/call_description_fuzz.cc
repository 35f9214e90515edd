// libFuzzer target: arbitrary bytes through the decoders of the call checks
// (docs/protocol-collective.md "Call description"): a call description and
// the call notice that carries one. Byte 0 picks the decoder (even: the
// description, odd: the notice), the rest is the encoding. A ProtocolError
// is a correct answer; a crash, a sanitizer report, or a decoded value whose
// encoding decodes differently is a bug. Every decoded description is also
// summarised and fed to the mismatch message, as an error would use it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "collective/call_description.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::collective;
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (data[0] % 2 == 0) {
      const CallDescription d = CallDescription::Decode(bytes);
      const std::string encoded = d.Encode();
      const CallDescription again = CallDescription::Decode(encoded);
      if (again.Encode() != encoded || again.Fingerprint() != d.Fingerprint() ||
          d.Fingerprint() == 0) {
        std::abort();
      }
      std::vector<MemberCall> calls(2);
      calls[0].call = d;
      calls[0].reached = true;
      calls[1].call = d;
      calls[1].call->name += "x";
      calls[1].reached = true;
      if (MismatchMessage(7, {0, 1}, 3, calls).empty() || d.Summary().empty()) std::abort();
    } else {
      const CallNotice n = CallNotice::Decode(bytes);
      const CallNotice again = CallNotice::Decode(n.Encode());
      if (again.communicator != n.communicator || again.sequence != n.sequence ||
          again.kind != n.kind || again.at != n.at || again.description != n.description ||
          again.text != n.text) {
        std::abort();
      }
    }
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
