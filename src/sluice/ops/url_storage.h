// Reading data over HTTP(S): a Storage (storage.h) that sends `http://` and `https://` paths
// to a web server through libcurl, `s3://` paths to an S3-compatible store (signed requests),
// and every other path to the storage it wraps (docs/shards.md, "Shards on a web server").
//
//   - ReadRange is one GET with a `Range` header; ReadFile a plain GET; Size a HEAD.
//   - Retries with exponential back-off on what may pass: 5xx and 429 answers, connection
//     resets and refusals, timeouts, a body cut short. 404 is NotFound, 401/403
//     PermissionDenied, any other 4xx FailedPrecondition, at once.
//   - Each request has a connect timeout and a total timeout; a body over the caller's
//     `max_bytes` is refused while it arrives.
//   - Which URLs may be read is the caller's choice: all (a trainer reading its own spec) or
//     those under given prefixes (a worker: `--data-url`); any other is PermissionDenied.
//   - Messages never hold a URL's user name, password or query string (RedactUrl): where a
//     credential can hide.
//
// Thread-safe: every request uses a connection of the calling thread (kept alive between its
// requests).
#ifndef SLUICE_OPS_URL_STORAGE_H_
#define SLUICE_OPS_URL_STORAGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/ops/storage.h"

namespace sluice::ops {

// Whether `path` is an http://, https:// or s3:// URL.
bool IsUrl(std::string_view path);

// Where `s3://BUCKET/KEY` URLs go and how their requests are signed (AWS signature V4),
// from the usual environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
// else the [AWS_PROFILE or default] section of AWS_SHARED_CREDENTIALS_FILE or
// ~/.aws/credentials; the region from AWS_REGION or AWS_DEFAULT_REGION (us-east-1); the
// endpoint of an S3-compatible store from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (AWS's own
// otherwise). Requests use path-style addressing: ENDPOINT/BUCKET/KEY.
struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:4568", no trailing '/'
  std::string region = "us-east-1";
  std::string access_key;
  std::string secret_key;
  std::string session_token;
};
S3Config S3ConfigFromEnvironment();

// The headers of a signed S3 GET or HEAD of `url` (the endpoint URL of the object) at
// `amz_date` ("20261125T010203Z"): x-amz-date, x-amz-content-sha256, x-amz-security-token
// (with a session token) and Authorization. Exposed for its test against AWS's published
// example.
// `extra` headers (lower-case names) are signed too and returned with the others; the payload
// is not hashed ("UNSIGNED-PAYLOAD") unless `payload_sha256` gives its hash.
std::vector<std::string> SignS3Request(
    const S3Config& config, const std::string& method, const std::string& url,
    const std::string& amz_date,
    const std::vector<std::pair<std::string, std::string>>& extra = {},
    const std::string& payload_sha256 = "UNSIGNED-PAYLOAD");

// The URL without its user information and query: "https://host/a/b.tar".
std::string RedactUrl(std::string_view url);

struct UrlOptions {
  bool allow_all = false;                     // every URL
  std::vector<std::string> allowed_prefixes;  // else only URLs starting with one of these
  double connect_timeout_s = 10;
  double timeout_s = 120;  // one request, transfer included
  // Attempts per request (the first and the retries). The back-off doubles from
  // backoff_initial_s up to backoff_max_s: 0.1 + 0.2 + 0.4 + 0.8 + 1.6 s, about 3 s in all
  // before a server that keeps failing is reported.
  int max_attempts = 6;
  double backoff_initial_s = 0.1;
  double backoff_max_s = 5;
  std::function<void(int64_t)> before_read;  // called with a read's size (a rate limiter)
  // For s3:// URLs; unset: S3ConfigFromEnvironment(), read at the first s3:// request.
  std::optional<S3Config> s3;
  // A local cache of whole objects (shards) read by range: the first read of an object
  // fetches all of it into cache_dir (a temporary file, renamed when complete), later reads
  // are local. The files together stay under cache_max_bytes: the least recently read go
  // first; an object bigger than that is read by range, uncached. Several processes may
  // share the folder. Empty: no cache. The trainer's: SLUICE_CACHE_DIR and
  // SLUICE_CACHE_MAX_BYTES (default 10 GiB); a worker's: --cache-dir, --cache-max-bytes.
  // 10 GiB by default: some thousands of shards of a few MB, a modest share of a training
  // node's local disk; set it to what the disk can spare.
  std::string cache_dir;
  int64_t cache_max_bytes = int64_t{10} << 30;
};

// `files` (not owned; must outlive the result) reads whatever is not a URL.
std::unique_ptr<Storage> MakeUrlStorage(const Storage* files, UrlOptions options);

// The trainer's storage: local paths as given, and every URL.
const Storage& LocalOrUrlStorage();

}  // namespace sluice::ops

#endif  // SLUICE_OPS_URL_STORAGE_H_
