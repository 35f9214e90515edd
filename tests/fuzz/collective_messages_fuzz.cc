// libFuzzer target: arbitrary bytes through the collective layer's
// per-message metadata decoders (docs/collectives.md): the mesh's hello and
// its acknowledgement, the copy status, the key of every data message and
// the reference of a piece sent by reference. Byte 0 picks the decoder
// (modulo 5), the rest is
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
    auto same_probe = [](const CopyProbe& a, const CopyProbe& b) {
      return a.pid == b.pid && a.address == b.address && a.cookie == b.cookie &&
             a.mailbox == b.mailbox;
    };
    switch (data[0] % 5) {
      case 0: {
        const Hello h = Hello::Decode(meta);
        const Hello again = Hello::Decode(h.Encode());
        if (again.rank != h.rank || again.connection != h.connection ||
            again.connections != h.connections || !same_probe(again.probe, h.probe)) {
          std::abort();
        }
        break;
      }
      case 1: {
        const MessageKey k = MessageKey::Decode(meta);
        const MessageKey again = MessageKey::Decode(k.Encode());
        if (again != k || again.call != k.call) std::abort();
        break;
      }
      case 2: {
        const HelloAck a = HelloAck::Decode(meta);
        const HelloAck again = HelloAck::Decode(a.Encode());
        if (again.reads_you != a.reads_you || !same_probe(again.probe, a.probe)) std::abort();
        break;
      }
      case 3: {
        const CopyStatus c = CopyStatus::Decode(meta);
        if (CopyStatus::Decode(c.Encode()).reads_you != c.reads_you) std::abort();
        break;
      }
      default: {
        const DataRef d = DataRef::Decode(meta);
        const DataRef again = DataRef::Decode(d.Encode());
        if (again.key != d.key || again.key.call != d.key.call || again.address != d.address ||
            again.length != d.length) {
          std::abort();
        }
        break;
      }
    }
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
