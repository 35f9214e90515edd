// A throwaway certificate authority: a fresh P-256 CA key and self-signed
// certificate in memory, issuing certificates a TlsContext accepts
// (docs/transport.md, "TLS"). The unit tests and `tandem bench transport
// --tls` make their key material with it at run time, so none is ever
// committed; a user trying TLS out can do the same. A production job should
// use certificates from its organisation's CA instead.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "net/tls_context.h"

struct evp_pkey_st;
struct x509_st;

namespace tandem::net {

/// A certificate and its private key, both PEM.
struct PemPair {
  std::string cert;
  std::string key;
};

/// Thread-safety: one thread at a time.
class CertificateAuthority {
 public:
  /// A new CA named `common_name`, valid from an hour ago for `validity`.
  /// Throws Error when OpenSSL fails.
  explicit CertificateAuthority(const std::string& common_name,
                                std::chrono::seconds validity = std::chrono::hours(24 * 365));
  ~CertificateAuthority();
  CertificateAuthority(const CertificateAuthority&) = delete;
  CertificateAuthority& operator=(const CertificateAuthority&) = delete;

  /// The CA's certificate (what TANDEM_TLS_CA names).
  std::string CertificatePem() const;

  /// A new key and a certificate for `common_name` signed by this CA, usable
  /// for both ends of a connection (server and client authentication), valid
  /// from now + `not_before` to now + `not_after` (negative offsets lie in
  /// the past: an expired certificate for a test). Throws Error.
  PemPair Issue(const std::string& common_name,
                std::chrono::seconds not_before = -std::chrono::hours(1),
                std::chrono::seconds not_after = std::chrono::hours(24 * 365)) const;

  /// Writes the CA's certificate and a new certificate for `common_name` to
  /// `dir` (ca.pem, <common_name>.pem, <common_name>.key, the key readable by
  /// the owner only) and returns the paths. Throws IoError naming a file
  /// that cannot be written.
  TlsFiles WriteFiles(const std::filesystem::path& dir, const std::string& common_name) const;

 private:
  evp_pkey_st* key_ = nullptr;  // owned
  x509_st* cert_ = nullptr;     // owned
};

/// Writes `text` to `path` with permissions `mode`, replacing it. Throws
/// IoError naming the file. Any thread.
void WriteTextFile(const std::filesystem::path& path, const std::string& text,
                   std::filesystem::perms mode);

}  // namespace tandem::net
