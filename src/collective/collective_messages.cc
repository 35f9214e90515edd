#include "collective/collective_messages.h"

#include <fmt/format.h>

#include "base/byte_io.h"
#include "tandem/error.h"

namespace tandem::collective {

namespace {

void PutProbe(base::ByteWriter& w, const CopyProbe& p) {
  w.Put(p.pid);
  w.Put(p.address);
  w.Put(p.cookie);
  w.Put(p.mailbox);
}

CopyProbe GetProbe(base::ByteReader& r) {
  CopyProbe p;
  p.pid = r.Get<int32_t>("probe pid");
  p.address = r.Get<uint64_t>("probe address");
  p.cookie = r.Get<uint64_t>("probe cookie");
  p.mailbox = r.Get<int32_t>("probe mailbox");
  if (p.pid < 0) throw ProtocolError(fmt::format("collective probe: negative pid {}", p.pid));
  if (p.mailbox < -1) {
    throw ProtocolError(
        fmt::format("collective probe: mailbox descriptor {} (-1 for none)", p.mailbox));
  }
  return p;
}

bool GetFlag(base::ByteReader& r, const char* what) {
  const auto v = r.Get<uint8_t>(what);
  if (v > 1) throw ProtocolError(fmt::format("collective {}: {} is not 0 or 1", what, v));
  return v == 1;
}

}  // namespace

std::string Hello::Encode() const {
  base::ByteWriter w;
  w.Put(rank);
  w.Put(connection);
  w.Put(connections);
  PutProbe(w, probe);
  w.Put(joined_epoch);
  return w.Take();
}

Hello Hello::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective hello");
  Hello h;
  h.rank = r.Get<int32_t>("rank");
  h.connection = r.Get<uint32_t>("connection");
  h.connections = r.Get<uint32_t>("connections");
  h.probe = GetProbe(r);
  h.joined_epoch = r.Get<uint32_t>("joined epoch");
  r.ExpectEnd();
  return h;
}

std::string HelloAck::Encode() const {
  base::ByteWriter w;
  PutProbe(w, probe);
  w.Put(static_cast<uint8_t>(reads_you ? 1 : 0));
  return w.Take();
}

HelloAck HelloAck::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective hello acknowledgement");
  HelloAck a;
  a.probe = GetProbe(r);
  a.reads_you = GetFlag(r, "reads-you flag");
  r.ExpectEnd();
  return a;
}

std::string CopyStatus::Encode() const {
  base::ByteWriter w;
  w.Put(static_cast<uint8_t>(reads_you ? 1 : 0));
  return w.Take();
}

CopyStatus CopyStatus::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective copy status");
  CopyStatus c;
  c.reads_you = GetFlag(r, "reads-you flag");
  r.ExpectEnd();
  return c;
}

namespace {

void PutKey(base::ByteWriter& w, const MessageKey& k) {
  w.Put(k.communicator);
  w.Put(k.sequence);
  w.Put(k.tag);
  w.Put(k.call);
}

MessageKey GetKey(base::ByteReader& r) {
  MessageKey k;
  k.communicator = r.Get<uint32_t>("communicator");
  k.sequence = r.Get<uint64_t>("sequence");
  k.tag = r.Get<uint64_t>("tag");
  k.call = r.Get<uint64_t>("call");
  return k;
}

}  // namespace

std::string MessageKey::Encode() const {
  base::ByteWriter w;
  PutKey(w, *this);
  return w.Take();
}

MessageKey MessageKey::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective data key");
  MessageKey k = GetKey(r);
  r.ExpectEnd();
  return k;
}

std::string DataRef::Encode() const {
  base::ByteWriter w;
  PutKey(w, key);
  w.Put(address);
  w.Put(length);
  return w.Take();
}

DataRef DataRef::Decode(const std::string& meta) {
  base::ByteReader r(meta, "collective data reference");
  DataRef d;
  d.key = GetKey(r);
  d.address = r.Get<uint64_t>("address");
  d.length = r.Get<uint64_t>("length");
  r.ExpectEnd();
  return d;
}

}  // namespace tandem::collective
