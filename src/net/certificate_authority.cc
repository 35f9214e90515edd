#include "net/certificate_authority.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "net/openssl_error.h"
#include "net/openssl_handles.h"
#include "tandem/error.h"

namespace tandem::net {
namespace {

using Cert = X509Handle;
using Key = PkeyHandle;

[[noreturn]] void Fail(const std::string& what) {
  throw Error(fmt::format("certificate authority: {}: {}", what, OpenSslErrorText()));
}

Key NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) Fail("generating a P-256 key");
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
  if (ext == nullptr || X509_add_ext(cert, ext, -1) != 1) {
    X509_EXTENSION_free(ext);
    Fail(fmt::format("adding extension {}", value));
  }
  X509_EXTENSION_free(ext);
}

// A certificate for `subject_key` named `common_name`, signed by
// `issuer_key`; `issuer` is null for a self-signed one.
Cert MakeCertificate(const std::string& common_name, EVP_PKEY* subject_key, X509* issuer,
                     EVP_PKEY* issuer_key, std::chrono::seconds not_before,
                     std::chrono::seconds not_after, bool is_ca) {
  Cert cert(X509_new());
  if (!cert) Fail("allocating a certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) Fail("drawing a serial number");
  serial[0] &= 0x7f;  // a positive INTEGER
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  bool ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) != nullptr;
  BN_free(bn);
  if (!ok || X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), not_before.count()) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), not_after.count()) == nullptr ||
      X509_set_pubkey(cert.get(), subject_key) != 1) {
    Fail("filling in a certificate");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                 -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name) != 1) {
    Fail(fmt::format("naming the certificate '{}'", common_name));
  }
  X509* signer = issuer ? issuer : cert.get();
  AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash");
  if (is_ca) {
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid");
    AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature");
    // Every tandem process is a server to some peers and a client to others.
    AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) Fail("signing a certificate");
  return cert;
}

template <typename WriteFn>
std::string ToPem(WriteFn write) {
  BioHandle bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) Fail("writing PEM");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string CertPem(X509* cert) {
  return ToPem([cert](BIO* b) { return PEM_write_bio_X509(b, cert); });
}

std::string KeyPem(EVP_PKEY* key) {
  return ToPem([key](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}

}  // namespace

CertificateAuthority::CertificateAuthority(const std::string& common_name,
                                           std::chrono::seconds validity) {
  Key key = NewKey();
  Cert cert = MakeCertificate(common_name, key.get(), nullptr, key.get(), -std::chrono::hours(1),
                              validity, /*is_ca=*/true);
  key_ = key.release();
  cert_ = cert.release();
}

CertificateAuthority::~CertificateAuthority() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

std::string CertificateAuthority::CertificatePem() const { return CertPem(cert_); }

PemPair CertificateAuthority::Issue(const std::string& common_name, std::chrono::seconds not_before,
                                    std::chrono::seconds not_after) const {
  Key key = NewKey();
  Cert cert =
      MakeCertificate(common_name, key.get(), cert_, key_, not_before, not_after, /*is_ca=*/false);
  return PemPair{CertPem(cert.get()), KeyPem(key.get())};
}

TlsFiles CertificateAuthority::WriteFiles(const std::filesystem::path& dir,
                                          const std::string& common_name) const {
  using std::filesystem::perms;
  PemPair pair = Issue(common_name);
  TlsFiles files{(dir / (common_name + ".pem")).string(), (dir / (common_name + ".key")).string(),
                 (dir / "ca.pem").string()};
  WriteTextFile(files.ca, CertificatePem(),
                perms::owner_read | perms::owner_write | perms::group_read | perms::others_read);
  WriteTextFile(files.cert, pair.cert,
                perms::owner_read | perms::owner_write | perms::group_read | perms::others_read);
  WriteTextFile(files.key, pair.key, perms::owner_read | perms::owner_write);
  return files;
}

void WriteTextFile(const std::filesystem::path& path, const std::string& text,
                   std::filesystem::perms mode) {
  // Created with its final permissions, so a key is never readable by
  // others, not even for a moment.
  std::filesystem::remove(path);
  base::UniqueFd fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode)));
  if (!fd) throw IoError(fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw IoError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
}

}  // namespace tandem::net
