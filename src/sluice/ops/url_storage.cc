#include "sluice/ops/url_storage.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::ops {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One easy handle per thread, reused so that its connection stays open between requests.
class Handle {
 public:
  Handle() : curl_(curl_easy_init()) {}
  ~Handle() {
    if (curl_ != nullptr) curl_easy_cleanup(curl_);
  }
  CURL* get() { return curl_; }

 private:
  CURL* curl_;
};

CURL* ThreadHandle() {
  thread_local Handle handle;
  return handle.get();
}

struct Body {
  std::string data;
  int64_t max_bytes = 0;
  bool over = false;
};

size_t Write(char* ptr, size_t size, size_t n, void* user) {
  Body* body = static_cast<Body*>(user);
  const size_t bytes = size * n;
  if (static_cast<int64_t>(body->data.size() + bytes) > body->max_bytes) {
    body->over = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  body->data.append(ptr, bytes);
  return bytes;
}

// What one request gave: a status and body, or a transport error.
struct Response {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  bool over_limit = false;
  int64_t content_length = -1;
  std::string error;
};

enum class Method { kGet, kHead };

Response Send(const std::string& url, Method method, std::optional<std::pair<int64_t, int64_t>> range,
              int64_t max_bytes, const UrlOptions& options,
              const std::vector<std::string>& headers) {
  GlobalInit();
  Response r;
  CURL* curl = ThreadHandle();
  if (curl == nullptr) {
    r.code = CURLE_FAILED_INIT;
    r.error = "cannot start an HTTP client";
    return r;
  }
  curl_easy_reset(curl);
  char error[CURL_ERROR_SIZE] = {0};
  Body body;
  body.max_bytes = max_bytes;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options.connect_timeout_s * 1000));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeout_s * 1000));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  std::string range_text;
  if (method == Method::kHead) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (range.has_value()) {
    range_text = absl::StrCat(range->first, "-", range->first + range->second - 1);
    curl_easy_setopt(curl, CURLOPT_RANGE, range_text.c_str());
  }
  curl_slist* list = nullptr;
  for (const std::string& h : headers) list = curl_slist_append(list, h.c_str());
  if (list != nullptr) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  r.code = curl_easy_perform(curl);
  if (list != nullptr) {
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(list);
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  curl_off_t length = -1;
  curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  r.content_length = length;
  r.over_limit = body.over;
  r.body = std::move(body.data);
  r.error = error[0] != '\0' ? error : curl_easy_strerror(r.code);
  return r;
}

// A transport error or an answer worth another try.
bool Retryable(const Response& r) {
  if (r.over_limit) return false;
  switch (r.code) {
    case CURLE_OK:
      return r.status >= 500 || r.status == 429;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_FAILED_INIT:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_PEER_FAILED_VERIFICATION:
      return false;
    default:
      return true;  // refused, reset, timed out, cut short, name lookup
  }
}

std::string Hex(const unsigned char* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return Hex(digest, sizeof(digest));
}

std::string Hmac(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

// RFC 3986 percent-encoding as S3 signs it: unreserved characters stay, '/' too in a path.
std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::AsciiStrToUpper(Hex(&c, 1)));
    }
  }
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// "s3://bucket/key" -> the object's URL at the endpoint (path style), or an error.
StatusOr<std::string> S3ObjectUrl(const S3Config& config, std::string_view s3_url) {
  std::string_view rest = s3_url.substr(5);
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 >= rest.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", RedactUrl(s3_url), "' is not s3://BUCKET/KEY"));
  }
  const std::string endpoint =
      config.endpoint.empty()
          ? absl::StrCat("https://s3.", config.region, ".amazonaws.com")
          : config.endpoint;
  return absl::StrCat(endpoint, "/", UriEncode(rest.substr(0, slash), false), "/",
                      UriEncode(rest.substr(slash + 1), true));
}

std::string AmzDateNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

class UrlStorageImpl final : public Storage {
 public:
  UrlStorageImpl(const Storage* files, UrlOptions options)
      : files_(files), options_(std::move(options)) {}

  StatusOr<Tensor> ReadFile(std::string_view path, int64_t max_bytes) const override {
    if (!IsUrl(path)) return files_->ReadFile(path, max_bytes);
    SLUICE_ASSIGN_OR_RETURN(std::string body, Fetch(path, Method::kGet, std::nullopt, max_bytes));
    return ToTensor(body);
  }

  StatusOr<Tensor> ReadRange(std::string_view path, int64_t offset, int64_t size,
                             int64_t max_bytes) const override {
    if (!IsUrl(path)) return files_->ReadRange(path, offset, size, max_bytes);
    if (offset < 0 || size < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read '", RedactUrl(path),
                                                     "': a negative range"));
    }
    if (size > max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("'", RedactUrl(path), "': ", size,
                       " bytes asked for, over the file-size limit of ", max_bytes, " bytes"));
    }
    if (size == 0) return Tensor::Empty(DType::kBytes, {0});
    if (options_.before_read) options_.before_read(size);
    if (!options_.cache_dir.empty()) {
      SLUICE_ASSIGN_OR_RETURN(std::optional<std::string> cached, Cached(path));
      if (cached.has_value()) {
        StatusOr<Tensor> local = LocalStorage().ReadRange(*cached, offset, size, max_bytes);
        // Evicted by another process between the check and the read: read it remotely.
        if (local.status().code() != absl::StatusCode::kNotFound) return local;
      }
    }
    SLUICE_ASSIGN_OR_RETURN(std::string body,
                            Fetch(path, Method::kGet, std::make_pair(offset, size), max_bytes));
    return ToTensor(body);
  }

  StatusOr<int64_t> Size(std::string_view path) const override {
    if (!IsUrl(path)) return files_->Size(path);
    int64_t length = -1;
    SLUICE_RETURN_IF_ERROR(Fetch(path, Method::kHead, std::nullopt, 0, &length).status());
    if (length < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", RedactUrl(path), "': the server gives no Content-Length"));
    }
    return length;
  }

  StatusOr<std::string> Resolve(std::string_view path) const override {
    if (!IsUrl(path)) return files_->Resolve(path);
    SLUICE_RETURN_IF_ERROR(Allowed(path));
    return std::string(path);
  }

 protected:
  StatusOr<int> Open(std::string_view path) const override {
    // Every read of a URL is overridden above; nothing opens one as a descriptor.
    return absl::InvalidArgumentError(
        absl::StrCat("'", RedactUrl(path), "' is a URL, read by request, not a file to open"));
  }

 private:
  static Tensor ToTensor(const std::string& body) {
    Tensor t = Tensor::Empty(DType::kBytes, {static_cast<int64_t>(body.size())});
    if (!body.empty()) std::memcpy(t.mutable_raw(), body.data(), body.size());
    return t;
  }

  Status Allowed(std::string_view url) const {
    if (options_.allow_all) return absl::OkStatus();
    for (const std::string& prefix : options_.allowed_prefixes) {
      if (url.substr(0, prefix.size()) == prefix) return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "'", RedactUrl(url), "' is not under a URL this process may read",
        options_.allowed_prefixes.empty()
            ? " (a worker reads URLs only under its --data-url prefixes)"
            : ""));
  }

  StatusOr<std::string> Fetch(std::string_view path, Method method,
                              std::optional<std::pair<int64_t, int64_t>> range, int64_t max_bytes,
                              int64_t* content_length = nullptr) const {
    SLUICE_RETURN_IF_ERROR(Allowed(path));
    const bool s3 = path.substr(0, 5) == "s3://";
    std::string url(path);
    const std::string shown = RedactUrl(path);
    const S3Config* s3_config = nullptr;
    if (s3) {
      s3_config = &S3();
      if (s3_config->access_key.empty() || s3_config->secret_key.empty()) {
        return absl::PermissionDeniedError(absl::StrCat(
            "cannot read '", shown, "': no S3 credentials (set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or give a credentials file)"));
      }
      SLUICE_ASSIGN_OR_RETURN(url, S3ObjectUrl(*s3_config, path));
    }
    double backoff = options_.backoff_initial_s;
    Response r;
    int attempt = 0;
    for (; attempt < std::max(1, options_.max_attempts); ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
        backoff = std::min(backoff * 2, options_.backoff_max_s);
      }
      // Signed afresh for each attempt: the signature holds the time.
      const std::vector<std::string> headers =
          s3 ? SignS3Request(*s3_config, method == Method::kHead ? "HEAD" : "GET", url,
                             AmzDateNow())
             : std::vector<std::string>{};
      r = Send(url, method, range, max_bytes, options_, headers);
      if (r.over_limit) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "'", shown, "' is over the file-size limit of ", max_bytes,
            " bytes (raise it with options.max_file_bytes, on a worker with --max-file-bytes)"));
      }
      if (r.code == CURLE_OK && (r.status == 200 || r.status == 206)) {
        if (content_length != nullptr) *content_length = r.content_length;
        if (method == Method::kHead || !range.has_value()) return std::move(r.body);
        // A server that ignores Range answers 200 with the whole file.
        if (r.status == 200 && static_cast<int64_t>(r.body.size()) >= range->first + range->second) {
          return r.body.substr(static_cast<size_t>(range->first),
                               static_cast<size_t>(range->second));
        }
        if (static_cast<int64_t>(r.body.size()) == range->second && r.status == 206) {
          return std::move(r.body);
        }
        // Fewer bytes than asked: the file ends before the range (a truncated shard).
        return absl::DataLossError(absl::StrCat("'", shown, "' ended before the ", range->second,
                                                " bytes at offset ", range->first,
                                                " (truncated)"));
      }
      if (!Retryable(r)) break;
    }
    const std::string what =
        r.code == CURLE_OK ? absl::StrCat("HTTP ", r.status) : absl::StrCat(r.error);
    const std::string tries = attempt > 1 ? absl::StrCat(" after ", attempt, " attempts") : "";
    const std::string message = absl::StrCat("cannot read '", shown, "': ", what, tries);
    if (r.code != CURLE_OK) return absl::UnavailableError(message);
    if (r.status == 404 || r.status == 410) return absl::NotFoundError(message);
    if (r.status == 401 || r.status == 403) return absl::PermissionDeniedError(message);
    if (r.status == 416) {
      return absl::DataLossError(absl::StrCat(message, " (the range is past the end: truncated)"));
    }
    if (r.status >= 500 || r.status == 429) return absl::UnavailableError(message);
    return absl::FailedPreconditionError(message);
  }

  // The cached copy of the object at `url`, fetched whole if it is not there yet; nullopt
  // when it does not fit the cache.
  StatusOr<std::optional<std::string>> Cached(std::string_view url) const {
    const std::string key = Sha256Hex(RedactUrl(url));
    const std::string path = absl::StrCat(options_.cache_dir, "/", key);
    {
      std::unique_lock<std::mutex> lock(cache_mu_);
      if (too_big_.count(key) > 0) return std::optional<std::string>();
      // One fetch per object in this process: others wait for it.
      cache_cv_.wait(lock, [&] { return fetching_.count(key) == 0; });
      if (utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) {  // there: marks it recently read
        return std::optional<std::string>(path);
      }
      fetching_.insert(key);
    }
    StatusOr<std::optional<std::string>> out = FetchIntoCache(url, key, path);
    std::lock_guard<std::mutex> lock(cache_mu_);
    fetching_.erase(key);
    if (out.ok() && !out->has_value()) too_big_.insert(key);
    cache_cv_.notify_all();
    return out;
  }

  StatusOr<std::optional<std::string>> FetchIntoCache(std::string_view url, const std::string& key,
                                                      const std::string& path) const {
    StatusOr<std::string> body = Fetch(url, Method::kGet, std::nullopt, options_.cache_max_bytes);
    if (body.status().code() == absl::StatusCode::kResourceExhausted) {
      return std::optional<std::string>();
    }
    if (!body.ok()) return body.status();
    std::error_code ec;
    std::filesystem::create_directories(options_.cache_dir, ec);
    const std::string tmp =
        absl::StrCat(options_.cache_dir, "/tmp.", key, ".", getpid(), ".", next_tmp_++);
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(body->data(), static_cast<std::streamsize>(body->size()));
      if (!out.good()) {
        std::filesystem::remove(tmp, ec);
        return absl::PermissionDeniedError(
            absl::StrCat("cannot write the cache file '", tmp, "' (--cache-dir)"));
      }
    }
    Evict(static_cast<int64_t>(body->size()));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::filesystem::remove(tmp, ec);
      return absl::PermissionDeniedError(absl::StrCat("cannot write the cache file '", path, "'"));
    }
    return std::optional<std::string>(path);
  }

  // Removes the least recently read cached objects until `incoming` more bytes fit. Files of
  // other processes are removed the same way; a reader that has one open keeps reading it.
  void Evict(int64_t incoming) const {
    struct Entry {
      std::filesystem::file_time_type when;
      int64_t bytes;
      std::filesystem::path path;
    };
    std::vector<Entry> entries;
    int64_t total = incoming;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(options_.cache_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("tmp.", 0) == 0 || !e.is_regular_file(ec)) continue;
      const int64_t bytes = static_cast<int64_t>(e.file_size(ec));
      entries.push_back({e.last_write_time(ec), bytes, e.path()});
      total += bytes;
    }
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.when < b.when; });
    for (const Entry& e : entries) {
      if (total <= options_.cache_max_bytes) break;
      if (std::filesystem::remove(e.path, ec)) total -= e.bytes;
    }
  }

  const S3Config& S3() const {
    std::call_once(s3_once_, [this] {
      s3_ = options_.s3.has_value() ? *options_.s3 : S3ConfigFromEnvironment();
    });
    return s3_;
  }

  const Storage* files_;
  UrlOptions options_;
  mutable std::once_flag s3_once_;
  mutable S3Config s3_;
  mutable std::mutex cache_mu_;
  mutable std::condition_variable cache_cv_;
  mutable std::set<std::string> fetching_;  // objects being fetched into the cache
  mutable std::set<std::string> too_big_;   // objects over cache_max_bytes
  mutable std::atomic<int64_t> next_tmp_{0};
};

}  // namespace

bool IsUrl(std::string_view path) {
  return path.substr(0, 7) == "http://" || path.substr(0, 8) == "https://" ||
         path.substr(0, 5) == "s3://";
}

S3Config S3ConfigFromEnvironment() {
  S3Config c;
  c.endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = Env("AWS_ENDPOINT_URL");
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (!Env("AWS_REGION").empty()) {
    c.region = Env("AWS_REGION");
  } else if (!Env("AWS_DEFAULT_REGION").empty()) {
    c.region = Env("AWS_DEFAULT_REGION");
  }
  c.access_key = Env("AWS_ACCESS_KEY_ID");
  c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
  c.session_token = Env("AWS_SESSION_TOKEN");
  if (!c.access_key.empty() && !c.secret_key.empty()) return c;
  // The shared credentials file: "[profile]" sections of "key = value" lines.
  std::string file = Env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty() && !Env("HOME").empty()) file = Env("HOME") + "/.aws/credentials";
  const std::string profile = Env("AWS_PROFILE").empty() ? "default" : Env("AWS_PROFILE");
  std::ifstream in(file);
  std::string line;
  bool in_profile = false;
  while (std::getline(in, line)) {
    const absl::string_view t = absl::StripAsciiWhitespace(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      in_profile = std::string(absl::StripAsciiWhitespace(t.substr(1, t.size() - 2))) == profile;
      continue;
    }
    const size_t eq = t.find('=');
    if (!in_profile || eq == absl::string_view::npos) continue;
    const std::string key(absl::StripAsciiWhitespace(t.substr(0, eq)));
    const std::string value(absl::StripAsciiWhitespace(t.substr(eq + 1)));
    if (key == "aws_access_key_id") c.access_key = value;
    if (key == "aws_secret_access_key") c.secret_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  return c;
}

std::vector<std::string> SignS3Request(
    const S3Config& config, const std::string& method, const std::string& url,
    const std::string& amz_date, const std::vector<std::pair<std::string, std::string>>& extra,
    const std::string& payload_sha256) {
  // host[:port] and the path as they go on the wire.
  const size_t scheme = url.find("://");
  const size_t host_start = scheme == std::string::npos ? 0 : scheme + 3;
  size_t path_start = url.find('/', host_start);
  if (path_start == std::string::npos) path_start = url.size();
  const std::string host = url.substr(host_start, path_start - host_start);
  std::string path = url.substr(path_start);
  if (path.empty()) path = "/";
  const std::string date = amz_date.substr(0, 8);
  const std::string& payload = payload_sha256;
  std::vector<std::pair<std::string, std::string>> signed_headers = {
      {"host", host}, {"x-amz-content-sha256", payload}, {"x-amz-date", amz_date}};
  if (!config.session_token.empty()) {
    signed_headers.push_back({"x-amz-security-token", config.session_token});
  }
  signed_headers.insert(signed_headers.end(), extra.begin(), extra.end());
  std::sort(signed_headers.begin(), signed_headers.end());
  std::string canonical_headers;
  std::vector<std::string> names;
  for (const auto& [name, value] : signed_headers) {
    absl::StrAppend(&canonical_headers, name, ":", value, "\n");
    names.push_back(name);
  }
  const std::string signed_names = absl::StrJoin(names, ";");
  const std::string canonical_request = absl::StrCat(
      method, "\n", path, "\n", "", "\n", canonical_headers, "\n", signed_names, "\n", payload);
  const std::string scope = absl::StrCat(date, "/", config.region, "/s3/aws4_request");
  const std::string to_sign = absl::StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n",
                                           Sha256Hex(canonical_request));
  const std::string key = Hmac(
      Hmac(Hmac(Hmac("AWS4" + config.secret_key, date), config.region), "s3"), "aws4_request");
  const std::string signature = Hmac(key, to_sign);
  std::vector<std::string> headers = {
      absl::StrCat("x-amz-date: ", amz_date), absl::StrCat("x-amz-content-sha256: ", payload)};
  if (!config.session_token.empty()) {
    headers.push_back(absl::StrCat("x-amz-security-token: ", config.session_token));
  }
  for (const auto& [name, value] : extra) headers.push_back(absl::StrCat(name, ": ", value));
  headers.push_back(absl::StrCat(
      "Authorization: AWS4-HMAC-SHA256 Credential=", config.access_key, "/", scope,
      ", SignedHeaders=", signed_names, ", Signature=",
      Hex(reinterpret_cast<const unsigned char*>(signature.data()), signature.size())));
  return headers;
}

std::string RedactUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t host_start = scheme + 3;
  size_t path_start = url.find('/', host_start);
  if (path_start == std::string_view::npos) path_start = url.size();
  std::string_view authority = url.substr(host_start, path_start - host_start);
  const size_t at = authority.rfind('@');
  if (at != std::string_view::npos) authority.remove_prefix(at + 1);
  std::string_view rest = url.substr(path_start);
  const size_t cut = rest.find_first_of("?#");
  if (cut != std::string_view::npos) rest = rest.substr(0, cut);
  return absl::StrCat(Av(url.substr(0, host_start)), Av(authority), Av(rest));
}

std::unique_ptr<Storage> MakeUrlStorage(const Storage* files, UrlOptions options) {
  return std::make_unique<UrlStorageImpl>(files, std::move(options));
}

const Storage& LocalOrUrlStorage() {
  static const Storage* storage = [] {
    UrlOptions options;
    options.allow_all = true;
    options.cache_dir = Env("SLUICE_CACHE_DIR");
    int64_t max_bytes = 0;
    if (absl::SimpleAtoi(Env("SLUICE_CACHE_MAX_BYTES"), &max_bytes) && max_bytes > 0) {
      options.cache_max_bytes = max_bytes;
    }
    return MakeUrlStorage(&LocalStorage(), options).release();
  }();
  return *storage;
}

}  // namespace sluice::ops
