// libFuzzer target: arbitrary bytes through the parameter server's metadata
// decoders (docs/protocol-ps.md). Byte 0 picks the decoder, the rest is the
// metadata. A ProtocolError is a correct answer; a crash, a sanitizer
// report, or a decoded request that does not survive re-encoding is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kv/kv_messages.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::kv;
  if (size == 0) return 0;
  std::string_view meta(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 5) {
      case 0: {
        KeyRequest q = KeyRequest::Decode(meta);
        (void)q.ExpectedPushBytes();
        // What decodes must encode to the same bytes and decode again.
        if (q.Encode() != meta) std::abort();
        (void)KeyRequest::Decode(q.Encode());
        break;
      }
      case 1: {
        OptimizerCommand c = OptimizerCommand::Decode(meta);
        if (c.Encode() != meta) std::abort();
        break;
      }
      case 2: {
        StatesCommand c = StatesCommand::Decode(meta);
        if (c.Encode() != meta) std::abort();
        break;
      }
      case 3:
        (void)ErrorReply::Decode(meta);  // never throws
        break;
      case 4: {
        Receipt r = Receipt::Decode(meta);
        if (r.Encode() != meta) std::abort();
        break;
      }
    }
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
