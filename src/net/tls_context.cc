#include "net/tls_context.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "base/unique_fd.h"
#include "net/openssl_error.h"
#include "net/openssl_handles.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

// Certificate bundles are kilobytes; anything this large is the wrong file.
constexpr size_t kMaxPemBytes = 16 << 20;

// Owners of the OpenSSL objects only this file uses.
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct X509StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
using Bio = BioHandle;
using Cert = X509Handle;

// A PEM file read whole, as an OpenSSL memory BIO; errors name `what` (the
// variable) and the path.
Bio ReadPemFile(const std::string& what, const std::string& path) {
  if (path.empty()) throw ConfigError(fmt::format("{} is empty: it must name a PEM file", what));
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    throw ConfigError(fmt::format("{}: cannot read {}: {}", what, path, std::strerror(errno)));
  }
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw ConfigError(fmt::format("{}: cannot read {}: {}", what, path, std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxPemBytes) {
      throw ConfigError(
          fmt::format("{}: {} is larger than {} bytes: not a PEM file of keys or "
                      "certificates",
                      what, path, kMaxPemBytes));
    }
  }
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || BIO_write(bio.get(), text.data(), static_cast<int>(text.size())) !=
                  static_cast<int>(text.size())) {
    throw Error(fmt::format("{}: cannot buffer {}: {}", what, path, OpenSslErrorText()));
  }
  return bio;
}

// Every certificate in a PEM file, in file order; at least one.
std::vector<Cert> ReadCertificates(const std::string& what, const std::string& path) {
  Bio bio = ReadPemFile(what, path);
  std::vector<Cert> certs;
  ClearOpenSslErrors();
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  // Reading stops with "no start line" at the end of the file; anything
  // else is a damaged certificate.
  unsigned long last = ERR_peek_last_error();
  bool clean_end = ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  if (last != 0 && !clean_end) {
    throw ConfigError(
        fmt::format("{}: {} holds a damaged certificate: {}", what, path, OpenSslErrorText()));
  }
  ClearOpenSslErrors();
  if (certs.empty()) {
    throw ConfigError(
        fmt::format("{}: {} holds no PEM certificate ('-----BEGIN CERTIFICATE-----')", what, path));
  }
  return certs;
}

// Refuses to prompt: an encrypted key cannot be used unattended.
int NoPassword(char*, int, int, void*) { return -1; }

PkeyHandle ReadKey(const std::string& path) {
  Bio bio = ReadPemFile("TANDEM_TLS_KEY", path);
  ClearOpenSslErrors();
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr);
  if (key == nullptr) {
    throw ConfigError(fmt::format(
        "TANDEM_TLS_KEY: {} holds no usable PEM private key (an encrypted key cannot be used; "
        "OpenSSL says: {})",
        path, OpenSslErrorText()));
  }
  return PkeyHandle(key);
}

std::string TimeText(const ASN1_TIME* t) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || ASN1_TIME_print(bio.get(), t) != 1) return "(unprintable time)";
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

void CheckValidity(const std::string& path, X509* cert) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
    throw ConfigError(fmt::format("TANDEM_TLS_CERT: the certificate in {} expired on {}", path,
                                  TimeText(X509_get0_notAfter(cert))));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0) {
    throw ConfigError(fmt::format("TANDEM_TLS_CERT: the certificate in {} is not valid before {}",
                                  path, TimeText(X509_get0_notBefore(cert))));
  }
}

// Verifies our own certificate the way a peer will, so that a certificate
// from the wrong CA is reported here rather than as refused connections.
void CheckIssuedByCa(SSL_CTX* ctx, const TlsFiles& files, X509* leaf,
                     const std::vector<Cert>& chain) {
  std::unique_ptr<STACK_OF(X509), X509StackFree> untrusted(sk_X509_new_null());
  for (const Cert& c : chain) {
    if (!untrusted || !sk_X509_push(untrusted.get(), c.get())) {
      throw Error("cannot build the certificate chain: out of memory");
    }
    X509_up_ref(c.get());
  }
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> vctx(X509_STORE_CTX_new());
  if (!vctx ||
      X509_STORE_CTX_init(vctx.get(), SSL_CTX_get_cert_store(ctx), leaf, untrusted.get()) != 1) {
    throw Error(fmt::format("cannot set up certificate verification: {}", OpenSslErrorText()));
  }
  if (X509_verify_cert(vctx.get()) != 1) {
    int err = X509_STORE_CTX_get_error(vctx.get());
    throw ConfigError(
        fmt::format("TANDEM_TLS_CERT: the certificate in {} does not verify against the CA in {} "
                    "(TANDEM_TLS_CA): {}",
                    files.cert, files.ca, X509_verify_cert_error_string(err)));
  }
}

}  // namespace

std::shared_ptr<const TlsContext> TlsContext::Load(const TlsFiles& files) {
  std::vector<Cert> certs = ReadCertificates("TANDEM_TLS_CERT", files.cert);
  auto key = ReadKey(files.key);
  std::vector<Cert> cas = ReadCertificates("TANDEM_TLS_CA", files.ca);
  X509* leaf = certs.front().get();
  CheckValidity(files.cert, leaf);
  ClearOpenSslErrors();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ClearOpenSslErrors();
    throw ConfigError(
        fmt::format("TANDEM_TLS_KEY: the key in {} does not belong to the certificate in {} "
                    "(TANDEM_TLS_CERT)",
                    files.key, files.cert));
  }

  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_method()));
  if (!ctx) throw Error(fmt::format("cannot create a TLS context: {}", OpenSslErrorText()));
  // TLS 1.3 only: one round trip, no renegotiation, only AEAD ciphers.
  if (SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1 ||
      SSL_CTX_use_certificate(ctx.get(), leaf) != 1 ||
      SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1) {
    throw Error(fmt::format("cannot configure the TLS context with {} and {}: {}", files.cert,
                            files.key, OpenSslErrorText()));
  }
  std::vector<Cert> intermediates;
  for (size_t i = 1; i < certs.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx.get(), certs[i].get()) != 1) {
      throw Error(fmt::format("cannot add certificate {} of {} to the chain: {}", i + 1, files.cert,
                              OpenSslErrorText()));
    }
    intermediates.push_back(std::move(certs[i]));
  }
  X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
  for (const Cert& ca : cas) {
    if (X509_STORE_add_cert(store, ca.get()) != 1) {
      throw Error(fmt::format("TANDEM_TLS_CA: cannot trust the certificates of {}: {}", files.ca,
                              OpenSslErrorText()));
    }
  }
  CheckIssuedByCa(ctx.get(), files, leaf, intermediates);

  // Both sides present a certificate and verify the other's (a server
  // refuses a client without one). Names are not checked: peers are reached
  // by the addresses in the node table, and the CA is the job's membership.
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // No session resumption: connections live as long as the job, and
  // tickets would only cost bytes after every handshake.
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  // Partial writes: SSL_write returns once a record is buffered rather than
  // waiting for the whole span (net/tls_session.h).
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return std::shared_ptr<const TlsContext>(new TlsContext(ctx.release(), files));
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

}  // namespace tandem::net
