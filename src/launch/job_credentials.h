// The per-job secret and job id that `tandem launch` hands every process of
// a job (TANDEM_SECRET, TANDEM_JOB_ID), the inputs of the HMAC handshake
// (src/net/hmac_handshake.h): only processes of this job can join it.
#pragma once

#include <string>

namespace tandem::launch {

/// 32 bytes from OpenSSL's random generator (RAND_bytes) as 64 lower-case
/// hex digits. Any thread. Throws Error when the generator fails.
std::string GenerateJobSecret();

/// A fresh job id: "job-" and 16 lower-case hex digits from RAND_bytes, so
/// that two jobs started the same second by the same user still differ.
/// Any thread. Throws Error when the generator fails.
std::string GenerateJobId();

}  // namespace tandem::launch
