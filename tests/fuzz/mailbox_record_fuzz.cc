// libFuzzer target: arbitrary bytes as a ring position of the collectives'
// same-host mailbox (src/collective/same_host_mailbox.h): what a peer
// process wrote is parsed like bytes from a socket. Byte 0 says how far the
// ring's end lies beyond the published bytes (0..3 records of 8 bytes); the
// rest is what was published. A ProtocolError is a correct answer; a crash,
// a sanitizer report, a record outside the published bytes, or a record
// whose encoding parses differently is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "collective/same_host_mailbox.h"
#include "tandem/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::collective;
  if (size == 0) return 0;
  const std::span<const std::byte> published(reinterpret_cast<const std::byte*>(data + 1),
                                             size - 1);
  const size_t to_end = published.size() + size_t{data[0] % 4u} * 8;
  try {
    const ParsedMailboxRecord r = ParseMailboxRecord(published, to_end);
    if (r.size == 0 || r.size % 8 != 0 || r.size > published.size()) std::abort();
    if (r.padding) {
      if (r.size != to_end) std::abort();
      return 0;
    }
    const std::byte* begin = published.data();
    const std::byte* end = begin + r.size;
    if (r.record.payload.data() < begin ||
        r.record.payload.data() + r.record.payload.size() > end) {
      std::abort();
    }
    std::vector<std::byte> again(r.size);
    WriteMailboxRecord(again.data(), r.record);
    const ParsedMailboxRecord back = ParseMailboxRecord(again, again.size());
    if (back.size != r.size || back.record.type != r.record.type ||
        back.record.key != r.record.key || back.record.address != r.record.address ||
        back.record.length != r.record.length ||
        back.record.payload.size() != r.record.payload.size() ||
        std::memcmp(back.record.payload.data(), r.record.payload.data(), r.record.payload.size()) !=
            0) {
      std::abort();
    }
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
