#include "launch/job_credentials.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/rand.h>

#include <array>
#include <cstdint>
#include <iterator>

#include "tandem/error.h"

namespace tandem::launch {
namespace {

template <size_t N>
std::string RandomHex(const char* what) {
  std::array<unsigned char, N> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    char reason[256];
    ERR_error_string_n(ERR_get_error(), reason, sizeof(reason));
    throw Error(fmt::format("cannot generate the job's {}: RAND_bytes failed: {}", what, reason));
  }
  std::string hex;
  hex.reserve(2 * N);
  for (unsigned char b : bytes) fmt::format_to(std::back_inserter(hex), "{:02x}", b);
  return hex;
}

}  // namespace

std::string GenerateJobSecret() { return RandomHex<32>("secret"); }

std::string GenerateJobId() { return "job-" + RandomHex<8>("id"); }

}  // namespace tandem::launch
