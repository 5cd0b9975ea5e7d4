// Checks of the PEM files given for TLS, made before they reach gRPC: gRPC only says that it
// could not build its credentials (and a server then fails to listen, which reads like an
// address in use), never which file is wrong or why. Every error names the flag and the file.
//
// Thread-safe (no shared state).
#ifndef SLUICE_RPC_TLS_FILES_H_
#define SLUICE_RPC_TLS_FILES_H_

#include <string>

#include "sluice/core/status.h"

namespace sluice::rpc {

// `file` (given as `flag`, e.g. "--tls-cert") holds at least one PEM certificate.
// InvalidArgument: "--tls-cert FILE: cannot read it: <reason>", "--tls-cert FILE: no PEM
// certificate in it (expected a '-----BEGIN CERTIFICATE-----' block)".
Status CheckPemCertificates(const std::string& file, const std::string& flag);

// `cert_file` holds a PEM certificate (chain), `key_file` a PEM private key, and the key is
// the certificate's (the first certificate of the chain). InvalidArgument naming the file
// that is unreadable or not PEM, or "--tls-key KEY does not match the certificate in
// --tls-cert CERT (...)".
Status CheckPemKeyPair(const std::string& cert_file, const std::string& cert_flag,
                       const std::string& key_file, const std::string& key_flag);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_TLS_FILES_H_
