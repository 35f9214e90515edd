// libFuzzer target: arbitrary bytes through the membership protocol's
// metadata decoders (docs/protocol-cluster.md): the node table, register,
// barrier, barrier failure, node-lost notice and plain text. Byte 0 picks
// the decoder, the rest is the metadata. A ProtocolError is a correct
// answer; a crash, a sanitizer report, or a decoded message whose encoding
// does not decode to the same encoding again is a bug. A node table that
// decodes must also satisfy what Decode promises to have validated.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>

#include "cluster/cluster_messages.h"
#include "tandem/error.h"

namespace {

// Encode(Decode(Encode(m))) == Encode(m): what decoded once is stable.
template <typename M>
void CheckStable(const M& m) {
  const std::string once = m.Encode();
  if (M::Decode(once).Encode() != once) std::abort();
}

void CheckTable(const tandem::cluster::NodeTable& t) {
  using tandem::Role;
  if (t.nodes.size() != static_cast<size_t>(1 + t.num_servers + t.num_workers)) std::abort();
  std::set<std::pair<int, int>> ranks;
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const auto& n = t.nodes[i];
    if (n.id != static_cast<int>(i)) std::abort();
    if ((i == 0) != (n.role == Role::kScheduler)) std::abort();
    const int count = n.role == Role::kServer   ? t.num_servers
                      : n.role == Role::kWorker ? t.num_workers
                                                : 1;
    if (n.rank < 0 || n.rank >= count) std::abort();
    if (!ranks.emplace(static_cast<int>(n.role), n.rank).second) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::cluster;
  if (size == 0) return 0;
  const std::string meta(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 9) {
      case 0: {
        NodeTable t = NodeTable::Decode(meta);
        CheckTable(t);
        CheckStable(t);
        break;
      }
      case 1:
        CheckStable(RegisterRequest::Decode(meta));
        break;
      case 2:
        CheckStable(BarrierRequest::Decode(meta));
        break;
      case 3:
        CheckStable(BarrierFailure::Decode(meta));
        break;
      case 4:
        CheckStable(NodeLostNotice::Decode(meta));
        break;
      case 5: {
        const std::string text = DecodeText(meta, "fuzzed text");
        if (DecodeText(EncodeText(text), "fuzzed text") != text) std::abort();
        break;
      }
      case 6:
        CheckStable(JobStopRequest::Decode(meta));
        break;
      case 7:
        CheckStable(JobStoppedNotice::Decode(meta));
        break;
      case 8:
        CheckStable(WorkerLeftNotice::Decode(meta));
        break;
    }
  } catch (const tandem::ProtocolError&) {
  }
  return 0;
}
