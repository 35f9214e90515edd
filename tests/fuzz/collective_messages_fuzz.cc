// libFuzzer target: arbitrary bytes through the collective layer's
// per-message metadata decoders (docs/collectives.md): the mesh's hello
// and the key of every data message. Byte 0 picks the decoder, the rest is
// the metadata. A ProtocolError is a correct answer; a crash, a sanitizer
// report, or a decoded value whose encoding decodes differently is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "collective/collective_messages.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::collective;
  if (size == 0) return 0;
  const std::string meta(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (data[0] % 2 == 0) {
      const Hello h = Hello::Decode(meta);
      const Hello again = Hello::Decode(h.Encode());
      if (again.rank != h.rank || again.connection != h.connection ||
          again.connections != h.connections) {
        std::abort();
      }
    } else {
      const MessageKey k = MessageKey::Decode(meta);
      if (MessageKey::Decode(k.Encode()) != k) std::abort();
    }
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
