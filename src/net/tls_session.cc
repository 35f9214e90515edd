#include "net/tls_session.h"

#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <climits>

#include "net/openssl_error.h"
#include "net/wire_format.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

// TLS alerts that mean "your certificate is not acceptable" (RFC 8446 6.2).
bool IsCertificateAlert(int alert) {
  switch (alert) {
    case SSL_AD_BAD_CERTIFICATE:
    case SSL_AD_UNSUPPORTED_CERTIFICATE:
    case SSL_AD_CERTIFICATE_REVOKED:
    case SSL_AD_CERTIFICATE_EXPIRED:
    case SSL_AD_CERTIFICATE_UNKNOWN:
    case SSL_AD_UNKNOWN_CA:
    case SSL_AD_ACCESS_DENIED:
    case SSL_AD_CERTIFICATE_REQUIRED:
      return true;
    default:
      return false;
  }
}

int ClampToInt(size_t n) { return n > INT_MAX ? INT_MAX : static_cast<int>(n); }

}  // namespace

TlsSession::TlsSession(const TlsContext& ctx, Role role, size_t buffer_bytes) {
  ssl_ = SSL_new(ctx.native());
  BIO* internal = nullptr;
  if (ssl_ == nullptr || BIO_new_bio_pair(&internal, buffer_bytes, &network_, buffer_bytes) != 1) {
    std::string why = OpenSslErrorText();
    if (ssl_ != nullptr) SSL_free(ssl_);
    throw Error(fmt::format("cannot create a TLS session: {}", why));
  }
  SSL_set_bio(ssl_, internal, internal);  // the session owns the internal half
  if (role == Role::kClient) {
    SSL_set_connect_state(ssl_);
  } else {
    SSL_set_accept_state(ssl_);
  }
}

TlsSession::~TlsSession() {
  SSL_free(ssl_);
  BIO_free(network_);
}

void TlsSession::CheckResult(int ret, const char* during) {
  int err = SSL_get_error(ssl_, ret);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    ClearOpenSslErrors();
    return;
  }
  unsigned long code = ERR_peek_error();
  int reason = ERR_GET_REASON(code);
  if (code != 0 && ERR_GET_LIB(code) == ERR_LIB_SSL && reason >= SSL_AD_REASON_OFFSET) {
    // The peer sent a fatal alert.
    int alert = reason - SSL_AD_REASON_OFFSET;
    std::string text = SSL_alert_desc_string_long(alert);
    ClearOpenSslErrors();
    if (IsCertificateAlert(alert)) {
      throw AuthFailed(fmt::format(
          "the peer refused our TLS certificate during {} (alert: {}); is our TANDEM_TLS_CERT "
          "issued by the CA the peer trusts?",
          during, text));
    }
    throw ProtocolError(fmt::format("the peer ended TLS during {} with alert: {}", during, text));
  }
  long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    ClearOpenSslErrors();
    throw AuthFailed(
        fmt::format("the peer's TLS certificate does not verify against our CA (TANDEM_TLS_CA): {}",
                    X509_verify_cert_error_string(verify)));
  }
  if (code != 0 && ERR_GET_LIB(code) == ERR_LIB_SSL &&
      reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    ClearOpenSslErrors();
    throw AuthFailed("the peer presented no TLS certificate");
  }
  if (err == SSL_ERROR_SYSCALL && code == 0) {
    throw ProtocolError(
        fmt::format("TLS failed during {}: unexpected end of the TLS stream", during));
  }
  throw ProtocolError(fmt::format("TLS failed during {}: {}", during, OpenSslErrorText()));
}

bool TlsSession::Handshake() {
  std::lock_guard lock(mu_);
  if (done_.load(std::memory_order_relaxed)) return true;
  ClearOpenSslErrors();
  int ret = SSL_do_handshake(ssl_);
  if (ret == 1) {
    done_.store(true, std::memory_order_release);
    return true;
  }
  CheckResult(ret, "the handshake");
  return false;
}

size_t TlsSession::Encrypt(std::span<const std::byte> plain) {
  std::lock_guard lock(mu_);
  if (plain.empty()) return 0;
  ClearOpenSslErrors();
  int ret = SSL_write(ssl_, plain.data(), ClampToInt(plain.size()));
  if (ret > 0) return static_cast<size_t>(ret);
  CheckResult(ret, "sending");
  return 0;
}

std::span<const std::byte> TlsSession::PendingCiphertext() {
  std::lock_guard lock(mu_);
  char* data = nullptr;
  int n = BIO_nread0(network_, &data);
  if (n <= 0) return {};
  return {reinterpret_cast<const std::byte*>(data), static_cast<size_t>(n)};
}

void TlsSession::ConsumeCiphertext(size_t n) {
  std::lock_guard lock(mu_);
  char* data = nullptr;
  if (n > 0) BIO_nread(network_, &data, ClampToInt(n));
}

std::span<std::byte> TlsSession::CiphertextSpace() {
  std::lock_guard lock(mu_);
  char* data = nullptr;
  int n = BIO_nwrite0(network_, &data);
  if (n <= 0) return {};
  return {reinterpret_cast<std::byte*>(data), static_cast<size_t>(n)};
}

void TlsSession::CommitCiphertext(size_t n) {
  std::lock_guard lock(mu_);
  char* data = nullptr;
  if (n > 0) BIO_nwrite(network_, &data, ClampToInt(n));
}

TlsSession::ReadResult TlsSession::Decrypt(std::span<std::byte> out, size_t* n) {
  std::lock_guard lock(mu_);
  ClearOpenSslErrors();
  int ret = SSL_read(ssl_, out.data(), ClampToInt(out.size()));
  if (ret > 0) {
    *n = static_cast<size_t>(ret);
    return ReadResult::kData;
  }
  *n = 0;
  if (SSL_get_error(ssl_, ret) == SSL_ERROR_ZERO_RETURN) return ReadResult::kClosed;
  CheckResult(ret, "receiving");
  return ReadResult::kWantMore;
}

std::string TlsSession::Description() {
  std::lock_guard lock(mu_);
  std::string peer = "no peer certificate";
  if (X509* cert = SSL_get1_peer_certificate(ssl_)) {
    char name[256] = {};
    X509_NAME_oneline(X509_get_subject_name(cert), name, sizeof(name));
    peer = fmt::format("peer certificate {}", name);
    X509_free(cert);
  }
  return fmt::format("{} {}, {}", SSL_get_version(ssl_), SSL_get_cipher_name(ssl_), peer);
}

bool StartsLikeTlsRecord(std::span<const std::byte> first_bytes) {
  if (first_bytes.empty()) return false;
  auto type = static_cast<uint8_t>(first_bytes[0]);
  if (type != 0x15 && type != 0x16) return false;
  return first_bytes.size() < 2 || static_cast<uint8_t>(first_bytes[1]) == 0x03;
}

bool StartsLikeTandemFrame(std::span<const std::byte> first_bytes) {
  if (first_bytes.empty()) return false;
  for (size_t i = 0; i < std::min<size_t>(first_bytes.size(), 4); ++i) {
    if (static_cast<uint8_t>(first_bytes[i]) != ((kWireMagic >> (8 * i)) & 0xff)) return false;
  }
  return true;
}

}  // namespace tandem::net
