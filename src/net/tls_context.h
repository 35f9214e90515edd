// The TLS configuration of one process: its certificate and key, and the CA
// that every peer's certificate must be issued by (docs/transport.md, "TLS").
//
// Loaded once at start-up from three PEM files (TANDEM_TLS_CERT,
// TANDEM_TLS_KEY, TANDEM_TLS_CA) and checked there, so that a bad file is
// reported by the process that has it, naming the file, instead of surfacing
// later as a refused connection on some peer: unreadable or malformed files,
// a key that does not belong to the certificate, a certificate that has
// expired or is not yet valid, or one the configured CA did not issue.
//
// Every connection of a TcpTransport then builds its TlsSession
// (net/tls_session.h) from the same context: TLS 1.3 only, both sides present
// their certificate and verify the other's against the CA.
#pragma once

#include <memory>
#include <string>

// OpenSSL's context, kept opaque here so that including this header does not
// pull in the OpenSSL headers.
struct ssl_ctx_st;

namespace tandem::net {

/// Where a process finds its TLS material (all PEM).
struct TlsFiles {
  std::string cert;  ///< TANDEM_TLS_CERT: this process's certificate, then any intermediates
  std::string key;   ///< TANDEM_TLS_KEY: the certificate's private key (unencrypted)
  std::string ca;    ///< TANDEM_TLS_CA: the CA certificate(s) peers must chain to
};

/// Thread-safety: immutable after Load(); any thread may create sessions
/// from it at the same time (OpenSSL's SSL_CTX is safe for that).
class TlsContext {
 public:
  /// Reads and checks the three files and builds the context. Throws
  /// ConfigError naming the variable and the file: unreadable, no PEM
  /// certificate / key in it, an encrypted key, a key that does not match
  /// the certificate, a certificate outside its validity period (with the
  /// dates), or a certificate that does not verify against the CA (with
  /// OpenSSL's reason). Any thread.
  static std::shared_ptr<const TlsContext> Load(const TlsFiles& files);

  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  /// The OpenSSL context sessions are made from. Any thread.
  ssl_ctx_st* native() const { return ctx_; }
  /// The files it was loaded from (for messages).
  const TlsFiles& files() const { return files_; }

 private:
  TlsContext(ssl_ctx_st* ctx, TlsFiles files) : ctx_(ctx), files_(std::move(files)) {}

  ssl_ctx_st* ctx_;  // owned
  TlsFiles files_;
};

}  // namespace tandem::net
