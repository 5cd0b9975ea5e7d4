#include "sluice/rpc/tls_files.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace sluice::rpc {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

StatusOr<std::string> ReadFile(const std::string& file, const std::string& flag) {
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", file, ": cannot read it: ", std::strerror(errno)));
  }
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", file, ": cannot read it: ", std::strerror(err)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

std::unique_ptr<BIO, BioFree> MemBio(const std::string& text) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

using CertPtr = std::unique_ptr<X509, X509Free>;

StatusOr<CertPtr> FirstCertificate(const std::string& file, const std::string& flag) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, ReadFile(file, flag));
  auto bio = MemBio(text);
  CertPtr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", file,
        ": no PEM certificate in it (expected a '-----BEGIN CERTIFICATE-----' block)"));
  }
  return cert;
}

}  // namespace

Status CheckPemCertificates(const std::string& file, const std::string& flag) {
  return FirstCertificate(file, flag).status();
}

Status CheckPemKeyPair(const std::string& cert_file, const std::string& cert_flag,
                       const std::string& key_file, const std::string& key_flag) {
  SLUICE_ASSIGN_OR_RETURN(CertPtr cert, FirstCertificate(cert_file, cert_flag));
  SLUICE_ASSIGN_OR_RETURN(std::string key_text, ReadFile(key_file, key_flag));
  auto bio = MemBio(key_text);
  // No passphrase callback: an encrypted key cannot be used by gRPC either.
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(
      bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        key_flag, " ", key_file,
        ": no unencrypted PEM private key in it (expected a '-----BEGIN PRIVATE KEY-----' or "
        "'-----BEGIN EC/RSA PRIVATE KEY-----' block)"));
  }
  const int match = X509_check_private_key(cert.get(), key.get());
  ERR_clear_error();
  if (match != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(key_flag, " ", key_file, " does not match the certificate in ", cert_flag, " ",
                     cert_file, " (the key is not the certificate's private key)"));
  }
  return absl::OkStatus();
}

}  // namespace sluice::rpc
