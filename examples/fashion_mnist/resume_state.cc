#include "resume_state.h"

#include <fmt/format.h>

#include <cstring>

#include "tandem/error.h"

namespace fashion_mnist {
namespace {

constexpr uint32_t kMagic = 0x53524D46;  // "FMRS"
constexpr uint16_t kVersion = 1;

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T Get(const std::string& in, size_t& pos, const char* field) {
  if (in.size() - pos < sizeof(T)) {
    throw tandem::IoError(
        fmt::format("resume state: truncated at {} ({} bytes)", field, in.size()));
  }
  T value;
  std::memcpy(&value, in.data() + pos, sizeof(T));
  pos += sizeof(T);
  return value;
}

}  // namespace

std::string EncodeResumeState(const ResumeState& s) {
  std::string out;
  Put(out, kMagic);
  Put(out, kVersion);
  Put(out, s.steps_done);
  Put(out, s.epoch);
  Put(out, s.next_step);
  Put(out, static_cast<uint64_t>(s.local_state.size()));
  out += s.local_state;
  return out;
}

ResumeState DecodeResumeState(const std::string& bytes) {
  size_t pos = 0;
  if (Get<uint32_t>(bytes, pos, "magic") != kMagic) {
    throw tandem::IoError("resume state: not the trainer's (bad magic)");
  }
  const auto version = Get<uint16_t>(bytes, pos, "version");
  if (version != kVersion) {
    throw tandem::IoError(fmt::format("resume state: version {}, expected {}", version, kVersion));
  }
  ResumeState s;
  s.steps_done = Get<int64_t>(bytes, pos, "steps done");
  s.epoch = Get<int32_t>(bytes, pos, "epoch");
  s.next_step = Get<int64_t>(bytes, pos, "next step");
  const auto local = Get<uint64_t>(bytes, pos, "local state length");
  if (local != bytes.size() - pos || s.steps_done < 0 || s.epoch < 0 || s.next_step < 0) {
    throw tandem::IoError(fmt::format(
        "resume state: inconsistent (steps {}, epoch {}, next step {}, local state {} of {} bytes)",
        s.steps_done, s.epoch, s.next_step, local, bytes.size() - pos));
  }
  s.local_state = bytes.substr(pos);
  return s;
}

}  // namespace fashion_mnist
