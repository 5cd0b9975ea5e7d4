// Helpers for the process-level offloading tests (tests/offload_*_test.cc): a temporary
// folder with a small JPEG data set written by `sluice gen-data`, real `sluice worker`
// processes on 127.0.0.1 (started, waited for, throttled and killed), the standard pipeline,
// and ways to compare runs (whole batches, or per-SampleId sample contents).
#ifndef SLUICE_TESTS_OFFLOAD_TEST_UTIL_H_
#define SLUICE_TESTS_OFFLOAD_TEST_UTIL_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/pipeline/spec.h"
#include "sluice/runtime/loader.h"

namespace sluice::offload_test {

namespace fs = std::filesystem;

inline std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() {
    std::string base = testing::TempDir() + "sluice_offload_XXXXXX";
    path_ = mkdtemp(base.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Starts the sluice binary with `args` (in `cwd` when given), stdout and stderr to files.
inline pid_t SpawnSluice(const std::vector<std::string>& args, const fs::path& out_path,
                         const fs::path& err_path, const fs::path& cwd = {}) {
  std::vector<std::string> words = {SLUICE_BINARY};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Runs the sluice binary to completion (stdout and stderr through files, never pipes).
inline Result RunSluice(const std::vector<std::string>& args, const fs::path& scratch,
                        const fs::path& cwd = {}) {
  static std::atomic<int> counter{0};
  const int n = counter++;
  const fs::path out_path = scratch / ("run.out." + std::to_string(n));
  const fs::path err_path = scratch / ("run.err." + std::to_string(n));
  const pid_t pid = SpawnSluice(args, out_path, err_path, cwd);
  Result r;
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  return r;
}

// Waits up to `seconds` for child `pid` to exit: its exit status (128 + the signal when a
// signal ended it), or nullopt if it is still running then.
inline std::optional<int> WaitExit(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::string Describe(const Result& r) {
  return "exit " + std::to_string(r.exit_code) + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

// A port on 127.0.0.1 that nothing listens on right now.
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// A `sluice worker` process. Killed (SIGKILL) and reaped when destroyed.
class WorkerProcess {
 public:
  // Starts `sluice worker --listen 127.0.0.1:<port> --threads <threads> --data-root <scratch>
  // <extra...>` (port 0: any; an explicit --data-root in `extra` replaces the scratch folder,
  // `--data-root ""` starts a worker that reads no files) and waits up to 30 s for its
  // --ready-file (written whole once it serves, with the port it bound). Returns null (with
  // a test failure) if it does not come up.
  static std::unique_ptr<WorkerProcess> Start(const fs::path& scratch, int port = 0,
                                              int threads = 1,
                                              const std::vector<std::string>& extra = {}) {
    static std::atomic<int> counter{0};
    auto w = std::unique_ptr<WorkerProcess>(new WorkerProcess());
    const int n = counter++;
    w->out_path_ = scratch / ("worker.out." + std::to_string(n));
    w->err_path_ = scratch / ("worker.err." + std::to_string(n));
    const fs::path ready = scratch / ("worker.ready." + std::to_string(n));
    std::vector<std::string> words = {SLUICE_BINARY,   "worker",
                                      "--listen",      absl::StrCat("127.0.0.1:", port),
                                      "--threads",     std::to_string(threads),
                                      "--ready-file",  ready.string()};
    if (std::find(extra.begin(), extra.end(), "--data-root") == extra.end()) {
      words.push_back("--data-root");
      words.push_back(scratch.string());
    }
    words.insert(words.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& s : words) argv.push_back(s.data());
    argv.push_back(nullptr);
    w->pid_ = fork();
    if (w->pid_ == 0) {
      const int out = open(w->out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open(w->err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0 || err < 0) _exit(126);
      dup2(out, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (fs::exists(ready)) {
        const nlohmann::json j = nlohmann::json::parse(ReadAll(ready), nullptr, false);
        const std::string address = j.is_object() ? j.value("address", "") : "";
        const size_t colon = address.rfind(':');
        if (colon == std::string::npos) {
          ADD_FAILURE() << "the worker's ready file has no address: " << ReadAll(ready);
          return nullptr;
        }
        w->port_ = std::stoi(address.substr(colon + 1));
        return w;
      }
      int status = 0;
      if (waitpid(w->pid_, &status, WNOHANG) == w->pid_) {
        w->pid_ = -1;
        ADD_FAILURE() << "worker exited: " << ReadAll(w->err_path_);
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "worker did not start listening: " << ReadAll(w->err_path_);
    return nullptr;
  }

  ~WorkerProcess() {
    StopThrottle();
    Kill(SIGKILL);
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int port() const { return port_; }
  // What the worker wrote on stderr so far (its session log: "session 1 opened for ...").
  std::string Stderr() const { return ReadAll(err_path_); }

  // Whether the process is still running (it has not exited or been killed).
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  // Sends `sig` and returns (a SIGTERM starts the worker's drain).
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Waits up to `seconds` for the worker to exit: its exit status, or nullopt if it still
  // runs.
  std::optional<int> WaitExit(double seconds) {
    if (pid_ <= 0) return std::nullopt;
    std::optional<int> code = offload_test::WaitExit(pid_, seconds);
    if (code.has_value()) pid_ = -1;
    return code;
  }

  // Sends `sig`; SIGKILL and SIGTERM also reap the process (after a SIGTERM, the worker
  // drains: up to its --drain-s).
  void Kill(int sig) {
    if (pid_ <= 0) return;
    if (sig == SIGKILL) kill(pid_, SIGCONT);
    kill(pid_, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }

  // Emulates a CPU-capped worker: stopped (SIGSTOP) for `off_ms`, then running for `on_ms`,
  // over and over, until StopThrottle() or destruction.
  void Throttle(int on_ms, int off_ms) {
    StopThrottle();
    throttling_ = true;
    throttle_ = std::thread([this, on_ms, off_ms] {
      while (throttling_.load()) {
        kill(pid_, SIGSTOP);
        std::this_thread::sleep_for(std::chrono::milliseconds(off_ms));
        kill(pid_, SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(on_ms));
      }
    });
  }
  void StopThrottle() {
    throttling_ = false;
    if (throttle_.joinable()) throttle_.join();
    if (pid_ > 0) kill(pid_, SIGCONT);
  }

 private:
  WorkerProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  fs::path out_path_;
  fs::path err_path_;
  std::atomic<bool> throttling_{false};
  std::thread throttle_;
};

// A folder that `make` fills, made once per `key` and shared by the test processes of one
// build. ctest runs every test in a process of its own, so a fixture's set-up runs once a
// test: under ASan, writing the autoplan tests' 240 JPEGs took 37 CPU-seconds a process.
// The folder lives under $SLUICE_TEST_CACHE (ctest sets it to the build's test-cache/), in a
// subfolder for the sluice binary's size and modification time, so a rebuilt binary makes
// everything afresh (and the old binary's folders are removed). The first process to ask
// makes it under an exclusive flock on the key's lock file, the others wait on that lock
// (the kernel releases it if the maker dies) and then find it made; a `make` that fails
// leaves nothing behind and the next process tries again. Without the variable (a test
// binary run by hand) the folder is made under `scratch`, unshared. Callers only read it:
// a test that changes its data copies it first (CopySharedData).
inline StatusOr<fs::path> SharedFolder(const std::string& key,
                                       const std::function<Status(const fs::path&)>& make,
                                       const fs::path& scratch) {
  const char* root_env = std::getenv("SLUICE_TEST_CACHE");
  const std::string name = absl::StrCat(std::hash<std::string>{}(key));
  // `dir` as made before, or made now; a make that fails (or died before) leaves nothing.
  const auto made_at = [&](const fs::path& dir) -> StatusOr<fs::path> {
    if (fs::exists(dir / ".made")) return dir;
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    if (Status s = make(dir); !s.ok()) {
      fs::remove_all(dir, ec);
      return s;
    }
    std::ofstream(dir / ".made") << key;
    return dir;
  };
  if (root_env == nullptr || *root_env == 0) return made_at(scratch / ("shared-" + name));
  struct stat st {};
  if (stat(SLUICE_BINARY, &st) != 0) return absl::InternalError("cannot stat " SLUICE_BINARY);
  const std::string build = absl::StrCat("sluice-", st.st_size, "-", st.st_mtim.tv_sec, "-",
                                         st.st_mtim.tv_nsec);
  const fs::path root = root_env;
  std::error_code ec;
  fs::create_directories(root / build, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot make ", (root / build).string()));
  // Holds a lock file open under an exclusive flock until it goes out of scope.
  struct Locked {
    explicit Locked(const fs::path& path) : fd(open(path.c_str(), O_CREAT | O_RDWR, 0644)) {
      if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
        close(fd);
        fd = -1;
      }
    }
    ~Locked() {
      if (fd >= 0) close(fd);  // closing releases the lock
    }
    int fd;
  };
  {
    Locked all(root / ".lock");
    if (all.fd < 0) return absl::InternalError("cannot lock " + (root / ".lock").string());
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.is_directory() && entry.path().filename() != build) fs::remove_all(entry, ec);
    }
  }
  const fs::path dir = root / build / name;
  Locked one(root / build / (name + ".lock"));
  if (one.fd < 0) return absl::InternalError("cannot lock " + dir.string());
  return made_at(dir);
}

// `sluice gen-data ARGS --out FOLDER/data`, shared as SharedFolder says: the folder that
// holds data/.
inline StatusOr<fs::path> SharedGenData(const std::vector<std::string>& args,
                                        const fs::path& scratch) {
  std::string key = "gen-data";
  for (const std::string& a : args) absl::StrAppend(&key, " ", a);
  return SharedFolder(
      key,
      [&](const fs::path& dir) -> Status {
        std::vector<std::string> all = args;
        all.push_back("--out");
        all.push_back((dir / "data").string());
        Result r = RunSluice(all, scratch);
        if (r.exit_code != 0) return absl::InternalError(Describe(r));
        return absl::OkStatus();
      },
      scratch);
}

// Copies `from`/data (a SharedGenData folder) to `to`/data, for a test that reads it through
// a worker whose data root is `to` or changes it.
inline void CopySharedData(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy(from / "data", to / "data", fs::copy_options::recursive, ec);
  ASSERT_FALSE(ec) << "copying " << (from / "data") << " to " << to << ": " << ec.message();
}

// Writes `count` 160x120 JPEGs in 4 class folders under `dir`/data with `sluice gen-data`
// (made once a build and copied: SharedGenData).
inline void GenerateImages(const fs::path& dir, int count) {
  StatusOr<fs::path> made =
      SharedGenData({"gen-data", "--kind", "jpeg", "--count", std::to_string(count), "--width",
                     "160", "--height", "120", "--classes", "4", "--seed", "3", "--threads", "2"},
                    dir);
  ASSERT_TRUE(made.ok()) << made.status();
  CopySharedData(*made, dir);
}

// The standard pipeline (five ops) over the data set, batches of `batch`.
inline std::string StandardPipelineYaml(const fs::path& dir, bool deterministic, int batch = 8,
                                        int epochs = 1) {
  return absl::Substitute(R"(source:
  files: "$0/data/**/*.jpg"
  label: parent_dir
  shuffle: true
  seed: 21
ops:
  - read_file
  - decode_jpeg: {}
  - random_resized_crop: {size: [32, 32], scale: [0.2, 1.0]}
  - random_flip: {p: 0.5}
  - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], layout: CHW}
batch: {size: $1, drop_remainder: false}
prefetch: 2
epochs: $3
options: {deterministic: $2, threads: 2}
)",
                          dir.string(), batch, deterministic ? "true" : "false", epochs);
}

inline pipeline::PipelineSpec StandardSpec(const fs::path& dir, bool deterministic, int batch = 8,
                                           int epochs = 1) {
  auto spec =
      pipeline::ParseSpec(StandardPipelineYaml(dir, deterministic, batch, epochs), "standard.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : pipeline::PipelineSpec{};
}

// A plan for `addresses` with small splits and fast reconnects; warnings are collected.
class Warnings {
 public:
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& w) {
      std::lock_guard<std::mutex> lock(mu_);
      all_.push_back(w);
    };
  }
  std::vector<std::string> all() const {
    std::lock_guard<std::mutex> lock(mu_);
    return all_;
  }
  std::string Joined() const {
    std::string s;
    for (const std::string& w : all()) absl::StrAppend(&s, w, "\n");
    return s;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> all_;
};

inline runtime::LoaderOptions Plan(const std::vector<std::string>& addresses, int cut, double ratio,
                                   Warnings* warnings,
                                   ReadMode mode = ReadMode::kRemoteRead) {
  runtime::LoaderOptions o;
  for (const std::string& a : addresses) {
    rpc::ConnectOptions c;
    c.address = a;
    c.connect_timeout_s = 3;
    o.workers.push_back(c);
  }
  o.cut = cut;
  o.ratio = ratio;
  o.read_mode = mode;
  o.threads = 2;
  o.split_size = 8;
  o.max_open_splits = 2;
  o.reconnect_initial_s = 0.05;
  o.reconnect_max_s = 0.5;
  if (warnings != nullptr) o.warn = warnings->Sink();
  return o;
}

inline std::vector<Element> DrainLocal(const pipeline::PipelineSpec& spec) {
  auto ex = pipeline::LocalExecutor::Create(spec);
  EXPECT_TRUE(ex.ok()) << ex.status();
  std::vector<Element> out;
  if (!ex.ok()) return out;
  for (;;) {
    Element e;
    bool end = false;
    Status s = (*ex)->GetNext(&e, &end);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok() || end) break;
    out.push_back(std::move(e));
  }
  return out;
}

// Takes `n` batches from the loader (a test failure if it ends or fails first).
inline void Take(runtime::Loader& loader, int n, std::vector<Element>* got) {
  for (int i = 0; i < n; ++i) {
    Element e;
    bool end = false;
    ASSERT_TRUE(loader.GetNext(&e, &end).ok());
    ASSERT_FALSE(end);
    got->push_back(std::move(e));
  }
}

inline Status Drain(runtime::Loader& loader, std::vector<Element>* out) {
  for (;;) {
    Element e;
    bool end = false;
    SLUICE_RETURN_IF_ERROR(loader.GetNext(&e, &end));
    if (end) return absl::OkStatus();
    out->push_back(std::move(e));
  }
}

// Each delivered sample's bytes (its row of every batch tensor) by SampleId; a sample seen
// twice is a test failure.
inline std::map<SampleId, std::string> SamplesById(const std::vector<Element>& batches) {
  std::map<SampleId, std::string> out;
  for (const Element& b : batches) {
    for (size_t m = 0; m < b.members.size(); ++m) {
      std::string bytes;
      for (const Tensor& t : b.tensors) {
        bytes.append(t.Slice(static_cast<int64_t>(m), static_cast<int64_t>(m) + 1).bytes());
      }
      if (!out.emplace(b.members[m], std::move(bytes)).second) {
        ADD_FAILURE() << "sample " << b.members[m].epoch << "/" << b.members[m].index
                      << " delivered twice";
      }
    }
  }
  return out;
}

// True if both runs gave the same batches, in the same order, bit for bit.
inline ::testing::AssertionResult SameBatches(const std::vector<Element>& expected,
                                              const std::vector<Element>& got) {
  if (expected.size() != got.size()) {
    return ::testing::AssertionFailure()
           << expected.size() << " batches expected, got " << got.size();
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i].members != got[i].members) {
      return ::testing::AssertionFailure() << "batch " << i << " has other members";
    }
    if (expected[i].tensors.size() != got[i].tensors.size()) {
      return ::testing::AssertionFailure() << "batch " << i << " has other fields";
    }
    for (size_t t = 0; t < expected[i].tensors.size(); ++t) {
      if (!expected[i].tensors[t].Equals(got[i].tensors[t])) {
        return ::testing::AssertionFailure() << "batch " << i << " field " << t
                                             << " differs: " << expected[i].tensors[t].DebugString()
                                             << " vs " << got[i].tensors[t].DebugString();
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Polls `condition` every 20 ms for up to `seconds`.
template <typename F>
bool WaitFor(F condition, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

// The JSON lines of a `--events` file written so far; the last line, while it has no newline
// yet, is still being written and is left out.
inline std::vector<nlohmann::json> ReadEvents(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(ReadAll(path));
  std::string line;
  while (std::getline(lines, line)) {
    if (lines.eof()) break;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

// The samples the trainer's last progress event counts (0 before the first).
inline int64_t ProgressSamples(const std::vector<nlohmann::json>& events) {
  int64_t samples = 0;
  for (const nlohmann::json& e : events) {
    if (e.value("event", "") == "progress") samples = std::max(samples, e.value("samples", 0L));
  }
  return samples;
}
inline int64_t ProgressSamples(const fs::path& events) {
  return ProgressSamples(ReadEvents(events));
}

}  // namespace sluice::offload_test

#endif  // SLUICE_TESTS_OFFLOAD_TEST_UTIL_H_
