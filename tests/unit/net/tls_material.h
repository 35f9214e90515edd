// Key material made at test time for the TLS tests (nothing is committed):
// certificate authorities that write PEM files into a temporary directory.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "base/temporary_directory.h"
#include "net/certificate_authority.h"
#include "net/tls_context.h"

namespace tandem::net::testing {

using TempDir = base::TemporaryDirectory;

/// One CA and a directory of its certificates. Thread-safety: one thread.
class TlsMaterial {
 public:
  explicit TlsMaterial(const std::string& ca_name) : dir_("tandem-tls-"), ca_(ca_name) {
    std::filesystem::create_directories(dir_.path() / ca_name);
    sub_ = dir_.path() / ca_name;
  }

  /// Writes ca.pem and a certificate and key for `name`; returns the paths.
  TlsFiles Files(const std::string& name) const { return ca_.WriteFiles(sub_, name); }
  /// A loaded context for a certificate named `name`.
  std::shared_ptr<const TlsContext> Context(const std::string& name) const {
    return TlsContext::Load(Files(name));
  }
  const CertificateAuthority& ca() const { return ca_; }
  const std::filesystem::path& dir() const { return sub_; }

 private:
  TempDir dir_;
  std::filesystem::path sub_;
  CertificateAuthority ca_;
};

}  // namespace tandem::net::testing
