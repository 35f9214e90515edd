// libFuzzer target: arbitrary bytes fed to the checkpoint file decoders
// (docs/checkpoints.md, "File format"). A file must either decode or be
// refused with IoError; a file that decodes must encode back to exactly the
// same bytes (the format is canonical: every field is read back as written).
//
// Input layout (seeds in tests/fuzz/corpus/checkpoint_file_fuzz/):
//   byte 0   bits 0-1: the decoder (0 server shard, 1 worker state,
//            2 manifest, 3 header only); bit 2: 1 rewrites the header's
//            body length to fit and appends a valid CRC-32C, so that the
//            fuzzer explores the body parsers behind the checksum (the rest
//            is then header + body, without the checksum); 0 feeds the
//            rest as it is
//   rest     the file
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "fuzz_check.h"
#include "kv/checkpoint_format.h"
#include "net/crc32c.h"
#include "tandem/error.h"

namespace {

using namespace tandem::kv;

constexpr const char* kTarget = "checkpoint_file_fuzz";

std::string Seal(std::string file) {
  if (file.size() >= CheckpointHeader::kSize) {
    const uint64_t body = file.size() - CheckpointHeader::kSize;
    std::memcpy(file.data() + 24, &body, sizeof(body));
  }
  const uint32_t crc = tandem::net::Crc32c(std::as_bytes(std::span(file.data(), file.size())));
  file.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int decoder = data[0] & 3;
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 4) file = Seal(std::move(file));
  try {
    switch (decoder) {
      case 0:
        FUZZ_CHECK(kTarget, EncodeServerCheckpoint(DecodeServerCheckpoint(file, "fuzz")) == file);
        break;
      case 1:
        FUZZ_CHECK(kTarget, EncodeWorkerCheckpoint(DecodeWorkerCheckpoint(file, "fuzz")) == file);
        break;
      case 2:
        FUZZ_CHECK(kTarget, EncodeManifest(DecodeManifest(file, "fuzz")) == file);
        break;
      default: {
        const CheckpointHeader h = DecodeCheckpointHeader(file, "fuzz");
        FUZZ_CHECK(kTarget, h.rank < h.ranks);
        break;
      }
    }
  } catch (const tandem::IoError& e) {
    FUZZ_CHECK(kTarget, std::strncmp(e.what(), "checkpoint file fuzz: ", 22) == 0);
  }
  return 0;
}
