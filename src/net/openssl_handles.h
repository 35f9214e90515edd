// Owning handles of OpenSSL objects: std::unique_ptr with the matching free
// function, so every early return and exception releases them.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>

namespace tandem::net {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

using BioHandle = std::unique_ptr<BIO, BioFree>;
using X509Handle = std::unique_ptr<X509, X509Free>;
using PkeyHandle = std::unique_ptr<EVP_PKEY, PkeyFree>;

}  // namespace tandem::net
