// Tar shards read over HTTP (docs/shards.md): from a real web server on loopback
// (tests/http_shard_server.py, a separate process), by the trainer and by a worker process
// that may read the store's URLs; a flaky server; messages that keep credentials out.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "offload_test_util.h"
#include "sluice/ops/url_storage.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/pipeline/spec.h"
#include "sluice/runtime/loader.h"
#include "sluice/runtime/profiler.h"

namespace sluice::offload_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A child process (stdout and stderr to `out`), killed when this goes.
class Child {
 public:
  Child(std::vector<std::string> words, const fs::path& out) : out_(out) {
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(126);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Waits for it to exit: its exit code (-1 if a signal ended it).
  int Wait() {
    int status = 0;
    const bool exited = pid_ > 0 && waitpid(pid_, &status, 0) == pid_;
    pid_ = -1;
    return exited && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Output() const { return ReadAll(out_); }

 private:
  pid_t pid_ = -1;
  fs::path out_;
};

// Runs a command to completion (stdout and stderr through a file, in Result::err).
Result RunCommand(std::vector<std::string> words, const fs::path& scratch) {
  static int counter = 0;
  const fs::path out = scratch / ("cmd.out." + std::to_string(counter++));
  Child child(std::move(words), out);
  Result r;
  r.exit_code = child.Wait();
  r.err = child.Output();
  return r;
}

// tests/http_shard_server.py serving `root`, failing `fail_rate` of the requests.
class HttpServer {
 public:
  // `rate` > 0: each response's body paced at that many bytes per second.
  static std::unique_ptr<HttpServer> Start(const fs::path& root, const fs::path& scratch,
                                           double fail_rate = 0, double rate = 0) {
    auto s = std::unique_ptr<HttpServer>(new HttpServer());
    s->log_ = scratch / "http.log";
    const fs::path ready = scratch / "http.ready";
    s->child_ = std::make_unique<Child>(
        std::vector<std::string>{"/usr/bin/python3",
                                 std::string(SLUICE_SOURCE_DIR) + "/tests/http_shard_server.py",
                                 "--root", root.string(), "--fail-rate",
                                 std::to_string(fail_rate), "--log", s->log_.string(),
                                 "--rate", std::to_string(rate), "--ready-file", ready.string()},
        scratch / "http.out");
    // The server writes its ready file whole (a rename) once it serves.
    if (!WaitFor([&] { return fs::exists(ready); }, 30)) {
      ADD_FAILURE() << "the web server did not start: " << s->child_->Output();
      return nullptr;
    }
    const nlohmann::json j = nlohmann::json::parse(ReadAll(ready), nullptr, false);
    if (!j.is_object() || !j.contains("port")) {
      ADD_FAILURE() << "the web server's ready file is not JSON with a port: " << ReadAll(ready);
      return nullptr;
    }
    s->port_ = j["port"].get<int>();
    return s;
  }
  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, "/", path);
  }
  // Requests answered with a 500 or a reset so far.
  int Failures() const {
    const std::string log = ReadAll(log_);
    int n = 0;
    for (size_t at = 0; (at = log.find('\n', at)) != std::string::npos; ++at) {
      const size_t start = log.rfind('\n', at - 1);
      const std::string line = log.substr(start == std::string::npos ? 0 : start + 1,
                                          at - (start == std::string::npos ? 0 : start + 1));
      n += line.ends_with(" 500") || line.ends_with(" reset");
    }
    return n;
  }

 private:
  std::unique_ptr<Child> child_;
  int port_ = 0;
  fs::path log_;
};

class ShardsHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result r = RunSluice({"gen-data", "--kind", "jpeg", "--count", "40", "--out",
                          (dir_.path() / "data").string(), "--width", "64", "--height", "48",
                          "--classes", "4", "--seed", "5", "--format", "tar", "--shard-size",
                          "12"},
                         dir_.path());
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }

  // The standard pipeline over shards named by `shards` (4 shards of 12, 12, 12, 4).
  static pipeline::PipelineSpec Spec(const std::string& shards) {
    auto spec = pipeline::ParseSpec(absl::StrCat(R"(source:
  shards: ")", shards, R"(shard-{000000..000003}.tar"
  data: jpg
  label: cls
  shuffle: true
  seed: 21
ops:
  - read_file
  - decode_jpeg: {}
  - random_resized_crop: {size: [24, 24]}
  - random_flip: {p: 0.5}
batch: {size: 8}
options: {deterministic: true, threads: 2}
)"),
                                    "shards.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  // Every field but `path` (the shard's local path or URL) of every batch.
  static std::vector<std::string> Content(const Schema& schema, const std::vector<Element>& got) {
    std::vector<std::string> out;
    for (const Element& batch : got) {
      std::string text;
      for (const SampleId& id : batch.members) absl::StrAppend(&text, id.epoch, ":", id.index, " ");
      for (size_t f = 0; f < schema.fields().size(); ++f) {
        if (schema.fields()[f].name == "path") continue;
        absl::StrAppend(&text, schema.fields()[f].name, "=", batch.tensors[f].bytes().size(), ":",
                        std::hash<std::string_view>()(batch.tensors[f].bytes()), " ");
      }
      out.push_back(std::move(text));
    }
    return out;
  }

  static std::vector<std::string> RunLocal(const pipeline::PipelineSpec& spec, Status* status) {
    auto ex = pipeline::LocalExecutor::Create(spec);
    if (!ex.ok()) {
      *status = ex.status();
      return {};
    }
    std::vector<Element> got;
    for (;;) {
      Element e;
      bool end = false;
      *status = (*ex)->GetNext(&e, &end);
      if (!status->ok() || end) break;
      got.push_back(std::move(e));
    }
    return Content((*ex)->output_schema(), got);
  }

  TempDir dir_;
};

TEST_F(ShardsHttpTest, TheTrainerReadsShardsOverHttpAsFromDisk) {
  auto server = HttpServer::Start(dir_.path() / "data", dir_.path());
  ASSERT_NE(server, nullptr);
  Status local_status, http_status;
  const auto local = RunLocal(Spec((dir_.path() / "data/shards/").string()), &local_status);
  const auto http = RunLocal(Spec(server->Url("shards/")), &http_status);
  ASSERT_TRUE(local_status.ok()) << local_status;
  ASSERT_TRUE(http_status.ok()) << http_status;
  ASSERT_EQ(local.size(), 5u);
  EXPECT_EQ(http, local);
  // Without the indexes gen-data wrote (SHARD.idx): each shard is scanned over HTTP.
  for (const auto& entry : fs::directory_iterator(dir_.path() / "data/shards")) {
    if (entry.path().extension() == ".idx") fs::remove(entry.path());
  }
  const auto scanned = RunLocal(Spec(server->Url("shards/")), &http_status);
  ASSERT_TRUE(http_status.ok()) << http_status;
  EXPECT_EQ(scanned, local);
}

// 30% of the requests fail (500s and resets): retries hide it, and every sample comes once.
TEST_F(ShardsHttpTest, AServerFailingThirtyPercentOfRequestsStillGivesEverySampleOnce) {
  auto server = HttpServer::Start(dir_.path() / "data", dir_.path(), /*fail_rate=*/0.3);
  ASSERT_NE(server, nullptr);
  Status local_status, http_status;
  const auto local = RunLocal(Spec((dir_.path() / "data/shards/").string()), &local_status);
  const auto http = RunLocal(Spec(server->Url("shards/")), &http_status);
  ASSERT_TRUE(http_status.ok()) << http_status;
  EXPECT_EQ(http, local);
  EXPECT_GT(server->Failures(), 10);  // the failures happened, and were retried
}

TEST_F(ShardsHttpTest, ErrorsNameTheUrlWithoutItsCredentials) {
  auto server = HttpServer::Start(dir_.path() / "data", dir_.path());
  ASSERT_NE(server, nullptr);
  const std::string secret_url =
      absl::StrCat("http://alice:s3cret@127.0.0.1:", server->Url("").substr(17),
                   "shards/missing.tar?X-Amz-Signature=abcdef");
  const ops::Storage& storage = ops::LocalOrUrlStorage();
  StatusOr<int64_t> size = storage.Size(secret_url);
  ASSERT_FALSE(size.ok());
  EXPECT_EQ(size.status().code(), absl::StatusCode::kNotFound);
  const std::string message(size.status().message());
  EXPECT_THAT(message, HasSubstr("shards/missing.tar"));
  EXPECT_THAT(message, HasSubstr("HTTP 404"));
  EXPECT_THAT(message, Not(HasSubstr("s3cret")));
  EXPECT_THAT(message, Not(HasSubstr("abcdef")));
  // Past the end of a shard: the range cannot be read (a truncated shard).
  StatusOr<Tensor> past =
      storage.ReadRange(server->Url("shards/shard-000003.tar"), 1 << 30, 10, 1 << 20);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kDataLoss) << past.status();
  // A URL outside what a worker may read.
  ops::UrlOptions only;
  only.allowed_prefixes = {server->Url("shards/")};
  auto confined = ops::MakeUrlStorage(&ops::LocalStorage(), only);
  EXPECT_TRUE(confined->Size(server->Url("shards/shard-000000.tar")).ok());
  StatusOr<int64_t> outside = confined->Size(server->Url("elsewhere.tar"));
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied);
}

// A worker with --data-url reads the members itself (read=remote): the same batches as the
// trainer reading everything. A worker without it refuses the URLs, with the flag named.
TEST_F(ShardsHttpTest, AWorkerReadsShardUrlsUnderItsDataUrlOnly) {
  auto server = HttpServer::Start(dir_.path() / "data", dir_.path());
  ASSERT_NE(server, nullptr);
  const pipeline::PipelineSpec spec = Spec(server->Url("shards/"));
  Status status;
  const auto expected = RunLocal(spec, &status);
  ASSERT_TRUE(status.ok()) << status;

  auto worker = WorkerProcess::Start(dir_.path(), 0, 1, {"--data-url", server->Url("shards/")});
  ASSERT_NE(worker, nullptr);
  Warnings warnings;
  auto loader = runtime::Loader::Create(
      spec, Plan({worker->address()}, /*cut=*/2, /*ratio=*/0.5, &warnings, ReadMode::kRemoteRead));
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<Element> got;
  Status drained = Drain(**loader, &got);
  ASSERT_TRUE(drained.ok()) << drained;
  EXPECT_EQ(Content((*loader)->output_schema(), got), expected);
  const runtime::LoaderReport report = (*loader)->Report();
  ASSERT_EQ(report.workers.size(), 1u);
  EXPECT_GT(report.workers[0].samples, 0);

  auto plain = WorkerProcess::Start(dir_.path(), 0, 1);
  ASSERT_NE(plain, nullptr);
  // The planner's probe asks each worker about the first shard: the worker with the URL
  // under its --data-url can read it (read=remote is open to it), the plain one cannot.
  const std::string check = runtime::StorageCheckPath(spec);
  EXPECT_EQ(check, server->Url("shards/shard-000000.tar"));
  std::vector<std::string> errors;
  const auto probes = runtime::ProbeWorkers(
      *rpc::GrpcConnector(),
      Plan({worker->address(), plain->address()}, 2, 0.5, &warnings, ReadMode::kRemoteRead).workers,
      &errors, check);
  ASSERT_EQ(probes.size(), 2u);
  ASSERT_TRUE(probes[0].has_value() && probes[1].has_value()) << absl::StrJoin(errors, "; ");
  EXPECT_EQ(probes[0]->can_read, std::optional<bool>(true));
  EXPECT_EQ(probes[1]->can_read, std::optional<bool>(false));
  auto refused = runtime::Loader::Create(
      spec, Plan({plain->address()}, /*cut=*/2, /*ratio=*/1.0, &warnings, ReadMode::kRemoteRead));
  ASSERT_TRUE(refused.ok()) << refused.status();
  std::vector<Element> none;
  Status failed = Drain(**refused, &none);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("--data-url"));
}

// The store's rate: a worker with the store under its --data-url measures it in the probe
// (the planner's storage bound for that worker), as ops::MeasureReadRate does here; a local
// path is not measured. The server paces its bodies at 4 MB/s, so a loaded machine can only
// read it slower, never faster.
TEST_F(ShardsHttpTest, AWorkersProbeMeasuresItsStoresRate) {
  constexpr double kRate = 4e6;
  const fs::path blob = dir_.path() / "data/blob.bin";
  std::ofstream(blob, std::ios::binary) << std::string(ops::kReadRateProbeBytes, 'x');
  auto server = HttpServer::Start(dir_.path() / "data", dir_.path(), 0, kRate);
  ASSERT_NE(server, nullptr);
  ops::UrlOptions options;
  options.allow_all = true;
  const std::unique_ptr<ops::Storage> urls = ops::MakeUrlStorage(&ops::LocalStorage(), options);
  StatusOr<double> rate = ops::MeasureReadRate(*urls, server->Url("blob.bin"));
  ASSERT_TRUE(rate.ok()) << rate.status();
  EXPECT_GT(*rate, 0);
  EXPECT_LT(*rate, kRate * 1.25);
  StatusOr<double> local = ops::MeasureReadRate(ops::LocalOrUrlStorage(), blob.string());
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, 0);

  auto worker = WorkerProcess::Start(dir_.path(), 0, 1, {"--data-url", server->Url("")});
  ASSERT_NE(worker, nullptr);
  Warnings warnings;
  std::vector<std::string> errors;
  const auto probes = runtime::ProbeWorkers(
      *rpc::GrpcConnector(),
      Plan({worker->address()}, 2, 0.5, &warnings, ReadMode::kRemoteRead).workers, &errors,
      server->Url("blob.bin"));
  ASSERT_EQ(probes.size(), 1u);
  ASSERT_TRUE(probes[0].has_value()) << absl::StrJoin(errors, "; ");
  EXPECT_EQ(probes[0]->can_read, std::optional<bool>(true));
  EXPECT_GT(probes[0]->store_bytes_per_s, 0);
  EXPECT_LT(probes[0]->store_bytes_per_s, kRate * 1.25);
  // What the planner takes from it.
  EXPECT_EQ(runtime::WorkerFromProbe(*probes[0]).storage_bytes_per_s,
            probes[0]->store_bytes_per_s);
}

// The cache: each shard fetched once whole, then read locally (the server sees no more
// requests for it); the folder stays under its limit as more shards come in, the least
// recently read going first; a shard over the limit is read by range, uncached.
TEST_F(ShardsHttpTest, TheCacheFetchesEachShardOnceAndStaysUnderItsLimit) {
  auto server = HttpServer::Start(dir_.path() / "data", dir_.path());
  ASSERT_NE(server, nullptr);
  const fs::path shards = dir_.path() / "data/shards";
  int64_t largest = 0;
  for (int i = 0; i < 4; ++i) {
    largest = std::max<int64_t>(
        largest, fs::file_size(shards / absl::StrFormat("shard-%06d.tar", i)));
  }
  ops::UrlOptions options;
  options.allow_all = true;
  options.cache_dir = (dir_.path() / "cache").string();
  options.cache_max_bytes = 2 * largest + 1024;  // two shards at most
  auto storage = ops::MakeUrlStorage(&ops::LocalStorage(), options);
  const auto cache_bytes = [&] {
    int64_t total = 0;
    for (const auto& e : fs::directory_iterator(options.cache_dir)) {
      total += static_cast<int64_t>(e.file_size());
    }
    return total;
  };
  const std::string first = server->Url("shards/shard-000000.tar");
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) {
      const std::string name = absl::StrFormat("shard-%06d.tar", i);
      const std::string whole = ReadAll(shards / name);
      StatusOr<Tensor> got = storage->ReadRange(server->Url("shards/" + name), 700, 300, 1 << 20);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->bytes(), whole.substr(700, 300));
      EXPECT_LE(cache_bytes(), options.cache_max_bytes) << "round " << round << " shard " << i;
    }
  }
  // Reading one shard over and over: fetched once.
  const std::string log_before = ReadAll(dir_.path() / "http.log");
  for (int k = 0; k < 20; ++k) ASSERT_TRUE(storage->ReadRange(first, 512, 100, 1 << 20).ok());
  const std::string log_after = ReadAll(dir_.path() / "http.log");
  EXPECT_LE(std::count(log_after.begin(), log_after.end(), '\n') -
                std::count(log_before.begin(), log_before.end(), '\n'),
            1);
  // A cache smaller than a shard: range reads, nothing kept.
  ops::UrlOptions small = options;
  small.cache_dir = (dir_.path() / "small-cache").string();
  small.cache_max_bytes = 1000;
  auto uncached = ops::MakeUrlStorage(&ops::LocalStorage(), small);
  ASSERT_TRUE(uncached->ReadRange(first, 512, 100, 1 << 20).ok());
  EXPECT_TRUE(!fs::exists(small.cache_dir) || fs::is_empty(small.cache_dir));
}

// An S3-compatible store on loopback (s3rver, installed by scripts/install-deps.sh): shards
// uploaded with curl's own signer (--aws-sigv4) read back through signed s3:// requests as
// from disk; a key the store does not know is refused, and the secret never shown. (s3rver
// checks the access key of a V4 request, not its signature: the signature itself is checked
// against AWS's published example, SignS3RequestTest.)
TEST_F(ShardsHttpTest, ShardsFromAnS3CompatibleStoreWithSignedRequests) {
  ASSERT_TRUE(fs::exists("/usr/bin/curl")) << "curl is missing: run scripts/install-deps.sh";
  std::string s3rver;
  for (const char* p : {"/usr/bin/s3rver", "/usr/local/bin/s3rver"}) {
    if (fs::exists(p)) s3rver = p;
  }
  ASSERT_FALSE(s3rver.empty()) << "s3rver is missing: run scripts/install-deps.sh";
  const int port = FreePort();
  const std::string endpoint = absl::StrCat("http://127.0.0.1:", port);
  fs::create_directories(dir_.path() / "s3");
  Child store({s3rver, "-d", (dir_.path() / "s3").string(), "-a", "127.0.0.1", "-p",
               std::to_string(port), "--configure-bucket", "shards"},
              dir_.path() / "s3rver.out");
  ASSERT_TRUE(WaitFor(
      [&] {
        return ops::LocalOrUrlStorage().Size(endpoint + "/").status().code() !=
               absl::StatusCode::kUnavailable;
      },
      30))
      << store.Output();
  for (int i = 0; i < 4; ++i) {
    const std::string name = absl::StrFormat("shard-%06d.tar", i);
    Result up = RunCommand({"/usr/bin/curl", "-sSf", "--aws-sigv4", "aws:amz:us-east-1:s3",
                            "--user", "S3RVER:S3RVER", "-H",
                            "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T",
                            (dir_.path() / "data/shards" / name).string(),
                            absl::StrCat(endpoint, "/shards/train/", name)},
                           dir_.path());
    ASSERT_EQ(up.exit_code, 0) << Describe(up) << store.Output();
  }
  setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
  setenv("AWS_ENDPOINT_URL", endpoint.c_str(), 1);
  setenv("AWS_REGION", "us-east-1", 1);
  Status local_status, s3_status;
  const auto local = RunLocal(Spec((dir_.path() / "data/shards/").string()), &local_status);
  const auto from_s3 = RunLocal(Spec("s3://shards/train/"), &s3_status);
  ASSERT_TRUE(s3_status.ok()) << s3_status;
  EXPECT_EQ(from_s3, local);

  ops::UrlOptions wrong;
  wrong.allow_all = true;
  wrong.s3 = ops::S3Config{endpoint, "us-east-1", "NOT-A-KEY", "not-the-secret", ""};
  auto storage = ops::MakeUrlStorage(&ops::LocalStorage(), wrong);
  StatusOr<int64_t> refused = storage->Size("s3://shards/train/shard-000000.tar");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("s3://shards/train/shard-000000.tar"));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("not-the-secret")));
}

}  // namespace
}  // namespace sluice::offload_test
