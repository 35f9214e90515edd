#include "collective/collective_messages.h"

#include "base/byte_io.h"

namespace tandem::collective {

std::string Hello::Encode() const {
  base::ByteWriter w;
  w.Put(rank);
  w.Put(connection);
  w.Put(connections);
  return w.Take();
}

Hello Hello::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective hello");
  Hello h;
  h.rank = r.Get<int32_t>("rank");
  h.connection = r.Get<uint32_t>("connection");
  h.connections = r.Get<uint32_t>("connections");
  r.ExpectEnd();
  return h;
}

std::string MessageKey::Encode() const {
  base::ByteWriter w;
  w.Put(communicator);
  w.Put(sequence);
  w.Put(tag);
  return w.Take();
}

MessageKey MessageKey::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective data key");
  MessageKey k;
  k.communicator = r.Get<uint32_t>("communicator");
  k.sequence = r.Get<uint64_t>("sequence");
  k.tag = r.Get<uint64_t>("tag");
  r.ExpectEnd();
  return k;
}

}  // namespace tandem::collective
