#include "net/openssl_error.h"

#include <openssl/err.h>

namespace tandem::net {

std::string OpenSslErrorText() {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out.empty() ? "no OpenSSL error queued" : out;
}

void ClearOpenSslErrors() { ERR_clear_error(); }

}  // namespace tandem::net
