// TlsContext::Load checks the TLS files at start-up and names the bad one;
// Config demands every file with TANDEM_TLS=1.
#include "net/tls_context.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "base/config.h"
#include "base/environment.h"
#include "net/certificate_authority.h"
#include "tandem/error.h"
#include "tls_material.h"

namespace tandem::net {
namespace {

using std::filesystem::perms;
using ::testing::HasSubstr;
using testing::TlsMaterial;

constexpr auto kReadable = perms::owner_read | perms::owner_write;

TEST(TlsContextTest, LoadsACertificateItsKeyAndItsCa) {
  TlsMaterial m("ca-one");
  TlsFiles files = m.Files("node");
  auto ctx = TlsContext::Load(files);
  ASSERT_NE(ctx, nullptr);
  EXPECT_NE(ctx->native(), nullptr);
  EXPECT_EQ(ctx->files().cert, files.cert);
}

// A broken set of files and what the error must say about it.
struct BadFilesCase {
  std::string name;
  // Breaks the files of `m` (whose good set is `files`).
  std::function<void(const TlsMaterial& m, TlsFiles& files)> spoil;
  // Substrings of the error; "{cert}", "{key}", "{ca}" stand for the paths.
  std::vector<std::string> expected;
};

std::string Expand(std::string s, const TlsFiles& f) {
  for (auto [token, value] :
       {std::pair<std::string, std::string>{"{cert}", f.cert}, {"{key}", f.key}, {"{ca}", f.ca}}) {
    for (size_t at; (at = s.find(token)) != std::string::npos;) s.replace(at, token.size(), value);
  }
  return s;
}

class TlsContextBadFilesTest : public ::testing::TestWithParam<BadFilesCase> {};

TEST_P(TlsContextBadFilesTest, IsAConfigErrorNamingTheFile) {
  TlsMaterial m("ca-one");
  TlsFiles files = m.Files("node");
  GetParam().spoil(m, files);
  try {
    TlsContext::Load(files);
    FAIL() << "Load accepted " << GetParam().name;
  } catch (const ConfigError& e) {
    for (const std::string& want : GetParam().expected) {
      EXPECT_THAT(e.what(), HasSubstr(Expand(want, files)));
    }
  }
}

void Overwrite(const std::string& path, const std::string& text) {
  WriteTextFile(path, text, kReadable);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TlsContextBadFilesTest,
    ::testing::Values(
        BadFilesCase{"MissingCertificate",
                     [](const TlsMaterial&, TlsFiles& f) { f.cert += ".missing"; },
                     {"TANDEM_TLS_CERT", "cannot read {cert}", "No such file"}},
        BadFilesCase{"MissingKey",
                     [](const TlsMaterial&, TlsFiles& f) { f.key += ".missing"; },
                     {"TANDEM_TLS_KEY", "cannot read {key}"}},
        BadFilesCase{"MissingCa",
                     [](const TlsMaterial&, TlsFiles& f) { f.ca += ".missing"; },
                     {"TANDEM_TLS_CA", "cannot read {ca}"}},
        BadFilesCase{"UnreadableKey",
                     [](const TlsMaterial&, TlsFiles& f) {
                       std::filesystem::permissions(f.key, perms::none);
                       if (::access(f.key.c_str(), R_OK) == 0) {
                         // Running as root: fall back to a directory.
                         f.key = std::filesystem::path(f.key).parent_path().string();
                       }
                     },
                     {"TANDEM_TLS_KEY", "{key}"}},
        BadFilesCase{"CertificateIsNotPem",
                     [](const TlsMaterial&, TlsFiles& f) { Overwrite(f.cert, "hello\n"); },
                     {"TANDEM_TLS_CERT", "{cert} holds no PEM certificate"}},
        BadFilesCase{"KeyIsNotPem",
                     [](const TlsMaterial&, TlsFiles& f) { Overwrite(f.key, "hello\n"); },
                     {"TANDEM_TLS_KEY", "{key} holds no usable PEM private key"}},
        BadFilesCase{
            "KeyOfAnotherCertificate",
            [](const TlsMaterial& m, TlsFiles& f) { Overwrite(f.key, m.ca().Issue("other").key); },
            {"TANDEM_TLS_KEY",
             "the key in {key} does not belong to the certificate in "
             "{cert}"}},
        BadFilesCase{"ExpiredCertificate",
                     [](const TlsMaterial& m, TlsFiles& f) {
                       PemPair old =
                           m.ca().Issue("node", -std::chrono::hours(48), -std::chrono::hours(24));
                       Overwrite(f.cert, old.cert);
                       Overwrite(f.key, old.key);
                     },
                     {"TANDEM_TLS_CERT", "the certificate in {cert} expired on"}},
        BadFilesCase{"CertificateNotYetValid",
                     [](const TlsMaterial& m, TlsFiles& f) {
                       PemPair later =
                           m.ca().Issue("node", std::chrono::hours(24), std::chrono::hours(48));
                       Overwrite(f.cert, later.cert);
                       Overwrite(f.key, later.key);
                     },
                     {"TANDEM_TLS_CERT", "the certificate in {cert} is not valid before"}},
        BadFilesCase{
            "CertificateFromAnotherCa",
            [](const TlsMaterial&, TlsFiles& f) {
              CertificateAuthority other("ca-two");
              PemPair foreign = other.Issue("node");
              Overwrite(f.cert, foreign.cert);
              Overwrite(f.key, foreign.key);
            },
            {"the certificate in {cert} does not verify against the CA in {ca}", "TANDEM_TLS_CA"}},
        BadFilesCase{
            "CaFileHoldsAKeyOnly",
            [](const TlsMaterial& m, TlsFiles& f) { Overwrite(f.ca, m.ca().Issue("x").key); },
            {"TANDEM_TLS_CA", "{ca} holds no PEM certificate"}}),
    [](const auto& param_info) { return param_info.param.name; });

class TlsConfigTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TlsConfigTest, TlsWithoutEveryFileIsAConfigErrorNamingTheVariable) {
  std::map<std::string, std::string> vars = {{"TANDEM_TLS", "1"},
                                             {"TANDEM_TLS_CERT", "/c.pem"},
                                             {"TANDEM_TLS_KEY", "/k.pem"},
                                             {"TANDEM_TLS_CA", "/ca.pem"}};
  vars.erase(GetParam());
  try {
    base::Config::FromEnvironment(base::Environment(vars));
    FAIL() << "accepted TANDEM_TLS=1 without " << GetParam();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("TANDEM_TLS=1 needs " + GetParam()));
  }
}

INSTANTIATE_TEST_SUITE_P(Variables, TlsConfigTest,
                         ::testing::Values("TANDEM_TLS_CERT", "TANDEM_TLS_KEY", "TANDEM_TLS_CA"));

TEST(TlsConfigTest, ReadsTheSwitchAndThePaths) {
  base::Config c = base::Config::FromEnvironment(base::Environment({{"TANDEM_TLS", "1"},
                                                                    {"TANDEM_TLS_CERT", "/c"},
                                                                    {"TANDEM_TLS_KEY", "/k"},
                                                                    {"TANDEM_TLS_CA", "/a"}}));
  EXPECT_TRUE(c.tls);
  EXPECT_EQ(c.tls_cert, "/c");
  EXPECT_EQ(c.tls_key, "/k");
  EXPECT_EQ(c.tls_ca, "/a");
  EXPECT_FALSE(base::Config::FromEnvironment(base::Environment()).tls);
}

}  // namespace
}  // namespace tandem::net
