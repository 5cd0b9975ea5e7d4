// The engine of `sluice bench SCENARIO.yaml` (bench_runner.h): builds the scenario's emulated cluster (testbed/), verifies
// its links and CPU quotas, generates the data once, starts a `sluice worker` in every worker
// host and runs each policy as a `sluice train` in the trainer host, then tears everything
// down (also on failure, SIGINT, SIGTERM or SIGHUP) and writes one JSON report (and a plot).
//
// A policy is a row of kPolicies: a name and the `--policy` values of `sluice train` it
// runs. One value is one run; several are a sweep whose best measured run is the policy's
// result (that is what `oracle` is). Adding a policy is adding a row.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "sluice/core/placement.h"
#include "sluice/pipeline/spec.h"
#include "sluice/runtime/train.h"
#include "sluice/testbed/bench_runner.h"
#include "sluice/testbed/exec.h"
#include "sluice/testbed/scenario.h"
#include "sluice/testbed/testbed.h"
#include "sluice/testbed/verify.h"

extern char** environ;
namespace sluice::testbed {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kWorkerPort = 7700;
// The store (scenario `store:`): tests/http_shard_server.py on Testbed::kStoreAddress.
constexpr int kStorePort = 8700;

// ---------------------------------------------------------------------------------------
// Policies.

// What a policy needs to know about the job to name its runs.
struct PolicyContext {
  int num_ops = 0;
  bool workers_have_storage = true;  // every worker can read the data itself
};

// The `--policy` values for `sluice train`: one entry is one run; several are a sweep.
using PolicyRuns = std::function<std::vector<std::string>(const PolicyContext&)>;

// A fixed plan's policy string, in the placement grammar's one spelling (so that two runs of
// the same plan share a key in BenchRunner::measured_).
std::string Fixed(int cut, double ratio, ReadMode read) {
  Placement p;
  p.cut = cut;
  p.ratio = ratio;
  p.read_mode = read;
  return PlacementString(p);
}

ReadMode DefaultRead(const PolicyContext& c) {
  return c.workers_have_storage ? ReadMode::kRemoteRead : ReadMode::kLocalRead;
}

// The oracle's sweep, pruned in two passes. Pass 1 runs every cut (1..num_ops and `batch`)
// with every read mode the workers allow at ratio 0.5. Pass 2 takes the two best (cut, read
// mode) pairs of pass 1 to ratios 0.25, 0.75 and 1.0, then refines the best point found by
// +-0.1 and, around the best after that, by +-0.05, and runs the best point with lz4 and
// with zstd (the codec is part of every plan a planner chooses). Cuts and read modes that
// lose at an even split are not explored further; a pair's rate is close to piecewise linear in the ratio
// (rising while the trainer limits, falling once the workers or links do), so the refinement
// lands within 0.05 of its peak. The sweep is built in BenchRunner because pass 2 depends on
// pass 1; this list is pass 1.
std::vector<std::string> OracleFirstPass(const PolicyContext& c) {
  std::vector<std::string> runs;
  std::vector<ReadMode> reads = {ReadMode::kRemoteRead, ReadMode::kLocalRead};
  if (!c.workers_have_storage) reads = {ReadMode::kLocalRead};
  for (const ReadMode read : reads) {
    for (int cut = 1; cut <= c.num_ops; ++cut) runs.push_back(Fixed(cut, 0.5, read));
    runs.push_back(Fixed(kCutAfterBatch, 0.5, read));
  }
  return runs;
}

struct PolicyDef {
  const char* name;
  const char* doc;
  PolicyRuns runs;
  bool oracle_sweep = false;
};

const std::vector<PolicyDef>& Policies() {
  static const std::vector<PolicyDef> kPolicies = {
      {"none", "everything on the trainer",
       [](const PolicyContext&) { return std::vector<std::string>{"none"}; }},
      {"full", "everything remote at the after-batch cut (how tf.data service is used by hand)",
       [](const PolicyContext& c) {
         return std::vector<std::string>{Fixed(kCutAfterBatch, 1.0, DefaultRead(c))};
       }},
      {"fastflow", "FastFlow's profiling runs and Algorithm 1 (sluice train --policy fastflow)",
       [](const PolicyContext&) { return std::vector<std::string>{"fastflow"}; }},
      {"sluice", "the sluice planner with the closed loop (sluice train --policy sluice)",
       [](const PolicyContext&) { return std::vector<std::string>{"sluice"}; }},
      {"oracle", "the best measured run of a sweep of cuts x read modes x ratios", OracleFirstPass,
       /*oracle_sweep=*/true},
  };
  return kPolicies;
}

// ---------------------------------------------------------------------------------------
// Signals: SIGINT/SIGTERM/SIGHUP are blocked in every thread and taken by one waiting
// thread, which only records them; the main thread polls and tears down.

std::atomic<int> g_signal{0};

void StartSignalThread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) {
        g_signal.store(sig);
        std::fprintf(stderr, "sluice bench: %s, tearing down\n", strsignal(sig));
      }
    }
  }).detach();
}

Status Interrupted() {
  return absl::CancelledError(absl::StrCat("interrupted by ", strsignal(g_signal.load())));
}

// ---------------------------------------------------------------------------------------
// Helpers.

std::string SelfPath() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("sluice") : p.string();
}

StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no JSON at ", path));
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
}

std::string Tail(const std::string& path, size_t max_chars = 1500) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_chars) s = "..." + s.substr(s.size() - max_chars);
  return s;
}

// Waits for `pid`, polling so that a signal or a deadline ends the wait (the child is then
// killed). `tick` runs every poll with the seconds since the start. Returns the exit code.
}  // namespace

SweepRunLimit OracleRunLimit(const json& sweep) {
  SweepRunLimit out;
  double best_rate = 0;
  for (const json& r : sweep) {
    if (!r.is_object()) continue;
    const double rate = r.value("samples_per_s", 0.0);
    const double wall = r.value("wall_s", 0.0);
    if (!(rate > best_rate) || !(wall > 0)) continue;
    best_rate = rate;
    out.limit_s = 2 * wall;
    out.fastest = absl::StrFormat("%s, %.0f samples/s in %.1f s",
                                  r.value("policy_arg", std::string("?")), rate, wall);
  }
  return out;
}

namespace {

StatusOr<int> WaitChild(pid_t pid, double timeout_s, const std::function<void(double)>& tick) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int wstatus = 0;
    const pid_t r = waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
      return 128 + WTERMSIG(wstatus);
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (g_signal.load() != 0 || elapsed > timeout_s) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      if (g_signal.load() != 0) return Interrupted();
      return absl::DeadlineExceededError(absl::StrFormat("gave up after %.0f s", timeout_s));
    }
    if (tick) tick(elapsed);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Runs `argv` in the root namespace with its output in `log`.
StatusOr<int> RunLogged(const std::vector<std::string>& argv, const std::string& log,
                        double timeout_s) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", strerror(rc)));
  }
  return WaitChild(pid, timeout_s, nullptr);
}

// Bytes counted on a veth end inside a namespace: {rx, tx}.
std::pair<int64_t, int64_t> LinkBytes(const std::string& netns, const std::string& dev) {
  StatusOr<testbed::ProgramResult> r =
      testbed::RunProgram({"ip", "-n", netns, "-j", "-s", "link", "show", "dev", dev});
  if (!r.ok() || r->exit_code != 0) return {-1, -1};
  try {
    const json j = json::parse(r->output);
    const json& stats = j.at(0).at("stats64");
    return {stats.at("rx").at("bytes").get<int64_t>(), stats.at("tx").at("bytes").get<int64_t>()};
  } catch (const std::exception&) {
    return {-1, -1};
  }
}

// ---------------------------------------------------------------------------------------
// The run.



class BenchRunner {
 public:
  BenchRunner(BenchOptions options, Scenario scenario)
      : options_(std::move(options)), scenario_(std::move(scenario)), self_(SelfPath()) {}
  ~BenchRunner() { StopStores(); }

  StatusOr<json> Run();

 private:
  Status GenerateData();
  // scenario.store: the HTTP stores, outside every host's CPU quota (a storage service, not
  // the host's CPU), and the routes that make Testbed::kStoreAddress name the right one.
  Status StartStores();
  Status StartStore(const testbed::Host& host, const std::string& name);
  void StopStores();
  // The data set as the trainer names it (--files): the loose files, the shards on disk, or
  // the shards' URLs at the store.
  std::string DataFiles() const;
  Status StartWorker(int i);
  Status StartWorkers();
  Status RestoreWorld();
  // One `sluice train` run under `policy`; its JSON plus what the bench measured around it.
  // `timeout_s` > 0: this run's own limit, within --run-timeout.
  StatusOr<json> RunTrain(const std::string& policy, const std::string& tag,
                          double timeout_s = 0);
  StatusOr<json> RunPolicy(const PolicyDef* def, const std::string& name);

  BenchOptions options_;
  Scenario scenario_;
  std::string self_;
  std::string data_dir_;
  std::string empty_dir_;
  std::unique_ptr<Testbed> testbed_;
  std::vector<pid_t> worker_pids_;
  std::vector<pid_t> store_pids_;
  PolicyContext context_;
  int run_counter_ = 0;
  // Every successful train run so far, by its --policy argument: a sweep reuses a grid
  // point another policy already measured (`full` is the oracle's batch/remote/1.0).
  std::map<std::string, json> measured_;
};

Status BenchRunner::GenerateData() {
  // One folder per data set (kind, count, seed, options) under the work or data dir, so
  // scenarios that share a data dir never share files they do not both want.
  data_dir_ = absl::StrCat(options_.data_dir.empty() ? options_.work_dir : options_.data_dir,
                           "/data-", scenario_.data_kind, "-", scenario_.data_count, "-",
                           scenario_.data_seed);
  for (const auto& [k, v] : scenario_.data_options) absl::StrAppend(&data_dir_, "-", k, v);
  const std::string marker = data_dir_ + "/.bench-complete";
  if (fs::exists(marker)) {
    std::fprintf(stderr, "sluice bench: data: reusing %s\n", data_dir_.c_str());
    return absl::OkStatus();
  }
  std::vector<std::string> argv = {
      self_,       "gen-data",
      "--kind",    scenario_.data_kind,
      "--count",   absl::StrCat(scenario_.data_count),
      "--seed",    absl::StrCat(scenario_.data_seed),
      "--out",     data_dir_,
      "--threads", absl::StrCat(std::max(1u, std::thread::hardware_concurrency()))};
  for (const auto& [k, v] : scenario_.data_options) {
    argv.push_back("--" + k);
    if (!v.empty()) argv.push_back(v);  // empty: a flag without a value (--boxes)
  }
  std::fprintf(stderr, "sluice bench: data: generating %lld %s files in %s\n",
               static_cast<long long>(scenario_.data_count), scenario_.data_kind.c_str(),
               data_dir_.c_str());
  const std::string log = options_.work_dir + "/gen-data.log";
  SLUICE_ASSIGN_OR_RETURN(int code, RunLogged(argv, log, 3600));
  if (code != 0) {
    return absl::InternalError(absl::StrCat("gen-data failed (", code, "): ", Tail(log)));
  }
  std::ofstream(marker) << "ok\n";
  return absl::OkStatus();
}

// Waits (15 s at most) until the process `pid` (`what`, for messages) says "listening on" in
// `log`: OK then; an error naming its stderr when it exited first (*exited set), or when it
// did not start, or Interrupted on a signal.
Status WaitListening(pid_t pid, const std::string& log, const std::string& err,
                     const std::string& what, bool* exited) {
  for (int attempt = 0; attempt < 300; ++attempt) {
    if (g_signal.load() != 0) return Interrupted();
    if (Tail(log).find("listening on") != std::string::npos) return absl::OkStatus();
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid) {
      *exited = true;
      return absl::InternalError(absl::StrCat(what, " exited at start: ", Tail(err)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(what, " did not start listening"));
}

// A file of the source tree above this binary (build/bin/sluice), e.g. bench/python_trainer.py.
StatusOr<fs::path> SourceFile(const std::string& self, const std::string& relative) {
  std::error_code ec;
  const fs::path bin = fs::absolute(fs::path(self), ec).parent_path();
  for (fs::path dir = bin; !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir / relative, ec)) return dir / relative;
    if (dir == dir.parent_path()) break;
  }
  return absl::NotFoundError(absl::StrCat(
      relative, " not found above ", bin.string(), " (run the sluice binary of a source tree's build)"));
}

std::string StoreUrl() {
  return absl::StrCat("http://", Testbed::kStoreAddress, ":", kStorePort, "/");
}

Status BenchRunner::StartStore(const testbed::Host& host, const std::string& name) {
  SLUICE_ASSIGN_OR_RETURN(fs::path script, SourceFile(self_, "tests/http_shard_server.py"));
  const std::string log = absl::StrCat(options_.work_dir, "/store-", name, ".log");
  Testbed::SpawnOptions spawn;
  spawn.stdout_path = log;
  spawn.stderr_path = log + ".err";
  spawn.join_cgroup = false;
  const std::vector<std::string> argv = {"/usr/bin/python3", script.string(), "--root",
                                         data_dir_,          "--host",        Testbed::kStoreAddress,
                                         "--port",           absl::StrCat(kStorePort)};
  SLUICE_ASSIGN_OR_RETURN(pid_t pid, testbed_->Spawn(host, argv, spawn));
  store_pids_.push_back(pid);
  bool exited = false;
  Status ready = WaitListening(pid, log, spawn.stderr_path, "the store beside " + name, &exited);
  if (exited) store_pids_.pop_back();
  return ready;
}

Status BenchRunner::StartStores() {
  if (scenario_.store == testbed::StoreAt::kNone) return absl::OkStatus();
  SLUICE_RETURN_IF_ERROR(testbed_->AddStoreAddress(testbed_->trainer()));
  SLUICE_RETURN_IF_ERROR(StartStore(testbed_->trainer(), "trainer"));
  for (int i = 0; i < testbed_->num_workers(); ++i) {
    if (scenario_.store == testbed::StoreAt::kTrainer) {
      SLUICE_RETURN_IF_ERROR(testbed_->RouteStoreToTrainer(i));
    } else {
      SLUICE_RETURN_IF_ERROR(testbed_->AddStoreAddress(testbed_->worker(i)));
      SLUICE_RETURN_IF_ERROR(StartStore(testbed_->worker(i), absl::StrCat("w", i)));
    }
  }
  return absl::OkStatus();
}

void BenchRunner::StopStores() {
  for (pid_t pid : store_pids_) {
    kill(pid, SIGKILL);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
  }
  store_pids_.clear();
}

std::string BenchRunner::DataFiles() const {
  if (!scenario_.data_shards) {
    return data_dir_ + (scenario_.data_kind == "wav" ? "/**/*.wav" : "/**/*.jpg");
  }
  if (scenario_.store == testbed::StoreAt::kNone) return data_dir_ + "/shards/shard-*.tar";
  // A URL cannot be globbed: the shards as a brace range (gen-data numbers them from 0).
  int64_t shards = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir_ + "/shards", ec)) {
    shards += e.path().extension() == ".tar" ? 1 : 0;
  }
  return absl::StrFormat("%sshards/shard-{000000..%06d}.tar", StoreUrl(),
                         std::max<int64_t>(shards, 1) - 1);
}

Status BenchRunner::StartWorker(int i) {
  const testbed::WorkerScenario& w = scenario_.workers[i];
  std::vector<std::string> argv = {
      self_,       "worker",
      "--listen",  absl::StrCat(testbed_->worker(i).address, ":", kWorkerPort),
      "--threads", absl::StrCat(std::max(1, static_cast<int>(std::ceil(w.cpus))))};
  // storage: none gives the worker an empty data root: it can only take elements the
  // trainer has read (read=local).
  argv.push_back("--data-root");
  argv.push_back(w.storage == StorageKind::kNone ? empty_dir_ : data_dir_);
  if (w.storage == StorageKind::kSlow) {
    argv.push_back("--read-limit");
    argv.push_back(absl::StrCat(static_cast<int64_t>(w.storage_bytes_per_s)));
  }
  if (scenario_.store != testbed::StoreAt::kNone && w.storage != StorageKind::kNone) {
    argv.push_back("--data-url");
    argv.push_back(StoreUrl());
  }
  const std::string log = absl::StrCat(options_.work_dir, "/worker-", i, ".log");
  Testbed::SpawnOptions spawn;
  spawn.stdout_path = log;
  spawn.stderr_path = absl::StrCat(options_.work_dir, "/worker-", i, ".err");
  SLUICE_ASSIGN_OR_RETURN(pid_t pid, testbed_->Spawn(testbed_->worker(i), argv, spawn));
  worker_pids_[i] = pid;
  bool exited = false;
  Status ready =
      WaitListening(pid, log, spawn.stderr_path, absl::StrCat("worker ", i), &exited);
  if (exited) worker_pids_[i] = -1;
  return ready;
}

Status BenchRunner::StartWorkers() {
  worker_pids_.assign(scenario_.workers.size(), -1);
  for (int i = 0; i < static_cast<int>(scenario_.workers.size()); ++i) {
    SLUICE_RETURN_IF_ERROR(StartWorker(i));
  }
  return absl::OkStatus();
}

// Undoes what a run's events did: CPU quotas back to the spec, killed workers restarted.
Status BenchRunner::RestoreWorld() {
  for (int i = 0; i < testbed_->num_workers(); ++i) {
    SLUICE_RETURN_IF_ERROR(testbed_->SetCpus(testbed_->worker(i), scenario_.workers[i].cpus));
    int wstatus = 0;
    if (worker_pids_[i] > 0 && waitpid(worker_pids_[i], &wstatus, WNOHANG) == worker_pids_[i]) {
      worker_pids_[i] = -1;
    }
    if (worker_pids_[i] < 0) SLUICE_RETURN_IF_ERROR(StartWorker(i));
  }
  return absl::OkStatus();
}

// The issue's recovery bound: an event's "after" rate is measured from this long after it.
constexpr double kEventSettleS = 15;

// For `trainer: {frontend: python}`: the Python training loop's command before the flags
// it shares with `sluice train`. The script is found in the source tree above this binary
// (build/bin/sluice), the Python module in its build tree (build/python).
StatusOr<std::vector<std::string>> PythonTrainerCommand(const std::string& self) {
  std::error_code ec;
  const fs::path build = fs::absolute(fs::path(self), ec).parent_path().parent_path();
  StatusOr<fs::path> script = SourceFile(self, "bench/python_trainer.py");
  if (!script.ok()) {
    return absl::NotFoundError(
        absl::StrCat("trainer.frontend python: ", script.status().message()));
  }
  bool module = false;
  for (const auto& e : fs::directory_iterator(build / "python/sluice", ec)) {
    module |= e.path().filename().string().rfind("_core", 0) == 0;
  }
  if (!module) {
    return absl::NotFoundError(absl::StrCat(
        "trainer.frontend python: no Python module in ", (build / "python/sluice").string(),
        " (it is built when pybind11-dev is installed: scripts/install-deps.sh)"));
  }
  return std::vector<std::string>{"/usr/bin/python3", script->string(), "--build-dir",
                                  build.string()};
}

// What one trainer's `sluice train --json` report says, as the bench records it.
json TrainerSummary(const std::string& policy, const json& result) {
  json out;
  out["policy_arg"] = policy;
  // Steady-state figures (after the warm-up steps) where the run has them.
  const json& rates = result.contains("steady") ? result["steady"] : result;
  out["samples_per_s"] = rates.value("samples_per_s", 0.0);
  out["stall_fraction"] = rates.value("stall_fraction", 0.0);
  out["run_samples_per_s"] = result.value("samples_per_s", 0.0);
  out["plan"] = result.value("plan", json::object());
  out["time_to_plan_s"] = result.value("time_to_plan_s", 0.0);
  // What a planner measured of the workers at the start (CPU, link, RTT, storage rate).
  if (result.contains("profile") && result["profile"].is_object() &&
      result["profile"].contains("measured") && result["profile"]["measured"].is_object()) {
    out["workers_measured"] = result["profile"]["measured"].value("workers", json::array());
  }
  out["wall_s"] = result.value("wall_s", 0.0);
  out["samples"] = result.value("samples", 0);
  return out;
}

// Jain's fairness index of `rates`: (sum x)^2 / (n sum x^2), 1 when all are equal, 1/n when
// one has everything; 1 for no rates or all zero.
double JainIndex(const std::vector<double>& rates) {
  double sum = 0;
  double squares = 0;
  for (double r : rates) {
    sum += r;
    squares += r * r;
  }
  return squares > 0 ? sum * sum / (static_cast<double>(rates.size()) * squares) : 1.0;
}

// Seconds from a run's start to its first plan that offloads (0 for a fixed plan that
// does; -1 when none did).
double TimeToOffload(const json& result) {
  if (result.contains("timeline") && result["timeline"].is_array()) {
    for (const json& e : result["timeline"]) {
      if (e.contains("plan") && e["plan"].value("offload", false)) return e.value("t_s", 0.0);
    }
  }
  // A fixed plan has no decisions: it offloads from the start if it sends anything away.
  const json plan = result.value("plan", json::object());
  const bool fixed_offload =
      plan.value("policy", "") == "fixed" && plan.value("ratio", 0.0) > 0;
  return fixed_offload ? 0.0 : -1.0;
}

StatusOr<json> BenchRunner::RunTrain(const std::string& policy, const std::string& tag,
                                     double timeout_s) {
  const double limit_s =
      timeout_s > 0 ? std::min(timeout_s, options_.run_timeout_s) : options_.run_timeout_s;
  SLUICE_RETURN_IF_ERROR(RestoreWorld());
  const int run = run_counter_++;
  const int trainers = testbed_->num_trainers();
  // Trainer 0's files keep the names of a one-trainer run; trainer k's carry "-k".
  const auto file = [&](int k, const char* ext) {
    return k == 0 ? absl::StrCat(options_.work_dir, "/train-", run, ext)
                  : absl::StrCat(options_.work_dir, "/train-", run, "-", k, ext);
  };
  std::vector<std::string> argv = {self_, "train"};
  if (scenario_.trainer_frontend == "python") {
    SLUICE_ASSIGN_OR_RETURN(argv, PythonTrainerCommand(self_));
  }
  argv.insert(argv.end(), {
      scenario_.ResolvePipelinePath(),
      "--files",
      DataFiles(),
      "--accelerator-ms",
      absl::StrCat(scenario_.accelerator_ms),
      "--steps",
      absl::StrCat(scenario_.steps),
      // Data never runs out: a planner's planning steps come on top of --steps.
      "--epochs",
      "-1",
      "--policy",
      policy});
  if (policy == "sluice") {
    // Costs learnt by one run of the bench are reused by the next (the metric store).
    argv.push_back("--metric-store");
    argv.push_back(options_.work_dir + "/metric-store");
  }
  if (policy != "none") {
    std::vector<std::string> addresses;
    for (int i = 0; i < testbed_->num_workers(); ++i) {
      addresses.push_back(absl::StrCat(testbed_->worker(i).address, ":", kWorkerPort));
    }
    argv.push_back("--workers");
    argv.push_back(absl::StrJoin(addresses, ","));
  }
  std::vector<std::pair<int64_t, int64_t>> before;
  for (int i = 0; i < testbed_->num_workers(); ++i) {
    before.push_back(LinkBytes(testbed_->trainer().netns, testbed_->TrainerVeth(i)));
  }
  std::fprintf(stderr, "sluice bench: %s: %s%s\n", tag.c_str(), policy.c_str(),
               trainers > 1 ? absl::StrCat(" (", trainers, " trainers)").c_str() : "");
  std::vector<pid_t> pids(trainers, -1);
  const auto spawn_trainer = [&](int k) -> Status {
    std::vector<std::string> args = argv;
    args.insert(args.end(),
                {"--threads",
                 absl::StrCat(std::max(1, static_cast<int>(std::ceil(testbed_->trainer(k).cpus)))),
                 "--json", file(k, ".json")});
    Testbed::SpawnOptions spawn;
    spawn.stdout_path = file(k, ".log");
    spawn.stderr_path = file(k, ".log") + ".err";
    SLUICE_ASSIGN_OR_RETURN(pids[k], testbed_->Spawn(testbed_->trainer(k), args, spawn));
    return absl::OkStatus();
  };
  // Trainers still running when this returns early (an error, a signal) are stopped.
  struct StopLeft {
    std::vector<pid_t>* pids;
    ~StopLeft() {
      for (pid_t& p : *pids) {
        if (p <= 0) continue;
        kill(-p, SIGKILL);
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
        p = -1;
      }
    }
  } stop_left{&pids};
  SLUICE_RETURN_IF_ERROR(spawn_trainer(0));
  const auto run_start = std::chrono::steady_clock::now();
  std::vector<bool> applied(scenario_.events.size(), false);
  std::vector<double> applied_unix_s(scenario_.events.size(), 0);
  Status event_error;
  std::vector<bool> started(trainers, false);
  started[0] = true;
  auto tick = [&](double) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    for (int k = 1; k < trainers; ++k) {
      if (started[k] || elapsed < scenario_.more_trainers[k - 1].start_s) continue;
      started[k] = true;
      Status s = spawn_trainer(k);
      if (!s.ok() && event_error.ok()) event_error = s;
    }
    for (size_t e = 0; e < scenario_.events.size(); ++e) {
      const testbed::ScenarioEvent& ev = scenario_.events[e];
      if (applied[e] || elapsed < ev.at_s) continue;
      applied[e] = true;
      applied_unix_s[e] = std::chrono::duration<double>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
      if (ev.kill) {
        if (worker_pids_[ev.worker] > 0) kill(worker_pids_[ev.worker], SIGKILL);
      } else {
        Status s = testbed_->SetCpus(testbed_->worker(ev.worker), *ev.cpus);
        if (!s.ok() && event_error.ok()) event_error = s;
      }
    }
  };
  std::vector<json> results;
  for (int k = 0; k < trainers; ++k) {
    // A later trainer whose start is still to come (the ones before it ended first).
    while (!started[k] && g_signal.load() == 0) {
      tick(0);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_signal.load() != 0) return Interrupted();
    SLUICE_RETURN_IF_ERROR(event_error);
    const pid_t pid = pids[k];
    StatusOr<int> code = WaitChild(pid, limit_s, tick);
    pids[k] = -1;  // reaped
    SLUICE_RETURN_IF_ERROR(code.status());
    SLUICE_RETURN_IF_ERROR(event_error);
    if (*code != 0) {
      return absl::InternalError(absl::StrCat(
          scenario_.trainer_frontend == "python" ? "the Python trainer (bench/python_trainer.py)"
                                                 : "sluice train",
          trainers > 1 ? absl::StrCat(" (trainer ", k, ")") : "", " --policy ", policy,
          " exited with ", *code, ": ", Tail(file(k, ".log") + ".err")));
    }
    SLUICE_ASSIGN_OR_RETURN(json r, ReadJson(file(k, ".json")));
    results.push_back(std::move(r));
  }
  const json& result = results[0];
  json out = TrainerSummary(policy, result);
  if (trainers > 1) {
    // The job's figures: the trainers' rates summed, and how evenly they were served.
    out["trainers"] = json::array();
    std::vector<double> rates;
    double sum = 0, run_sum = 0, stall = 0, slowest_plan = 0;
    int64_t samples = 0;
    for (int k = 0; k < trainers; ++k) {
      json t = TrainerSummary(policy, results[k]);
      t["trainer"] = testbed_->trainer(k).name;
      t["cpus"] = testbed_->trainer(k).cpus;
      t["start_s"] = k == 0 ? 0.0 : scenario_.more_trainers[k - 1].start_s;
      t["time_to_offload_s"] = TimeToOffload(results[k]);
      t["timeline"] = results[k].value("timeline", json::array());
      rates.push_back(t["samples_per_s"].get<double>());
      sum += rates.back();
      run_sum += t["run_samples_per_s"].get<double>();
      stall += t["stall_fraction"].get<double>() / trainers;
      slowest_plan = std::max(slowest_plan, t["time_to_plan_s"].get<double>());
      samples += t["samples"].get<int64_t>();
      out["trainers"].push_back(std::move(t));
    }
    out["samples_per_s"] = sum;
    out["run_samples_per_s"] = run_sum;
    out["stall_fraction"] = stall;
    out["time_to_plan_s"] = slowest_plan;
    out["samples"] = samples;
    out["fairness_jain"] = JainIndex(rates);
  }
  // Share of the samples processed per host (the trainers' together).
  int64_t local = 0;
  std::vector<int64_t> per_worker(testbed_->num_workers(), 0);
  for (const json& r : results) {
    local += r.value("samples_local", int64_t{0});
    if (r.contains("places") && r["places"].contains("workers")) {
      const json& ws = r["places"]["workers"];
      for (size_t i = 0; i < ws.size() && i < per_worker.size(); ++i) {
        per_worker[i] += ws[i].value("samples", int64_t{0});
      }
    }
  }
  int64_t total = local;
  for (int64_t w : per_worker) total += w;
  out["share"]["trainer"] = total > 0 ? static_cast<double>(local) / total : 1.0;
  for (size_t i = 0; i < per_worker.size(); ++i) {
    out["share"][testbed_->worker(static_cast<int>(i)).name] =
        total > 0 ? static_cast<double>(per_worker[i]) / total : 0.0;
  }
  // Bytes on each link, counted by the trainer's veth end.
  out["link_bytes"] = json::array();
  for (int i = 0; i < testbed_->num_workers(); ++i) {
    const auto after = LinkBytes(testbed_->trainer().netns, testbed_->TrainerVeth(i));
    out["link_bytes"].push_back({{"worker", testbed_->worker(i).name},
                                 {"to_trainer", after.first - before[i].first},
                                 {"to_worker", after.second - before[i].second}});
  }
  // Each event as the training loop saw it: the rates before it, per second after it, and
  // from kEventSettleS after it to the end (docs/BENCHMARKS.md, "Recovery after the event").
  if (!scenario_.events.empty() && result.contains("progress")) {
    const json& progress = result["progress"];
    const auto ends = progress.value("step_end_s", std::vector<double>{});
    const auto samples = progress.value("samples", std::vector<int64_t>{});
    const double start_unix_s = progress.value("start_unix_s", 0.0);
    out["events"] = json::array();
    for (size_t e = 0; e < scenario_.events.size(); ++e) {
      if (!applied[e]) continue;
      const EventWindows w =
          MeasureEventWindows(ends, samples, applied_unix_s[e] - start_unix_s, kEventSettleS);
      out["events"].push_back({{"at_s", scenario_.events[e].at_s},
                               {"t_s", w.t_s},
                               {"settle_s", kEventSettleS},
                               {"before_samples_per_s", w.before_samples_per_s},
                               {"settled_samples_per_s", w.settled_samples_per_s},
                               {"per_s", w.per_s}});
    }
  }
  out["train"] = result;
  return out;
}

StatusOr<json> BenchRunner::RunPolicy(const PolicyDef* def, const std::string& name) {
  if (def == nullptr) return RunTrain(name, name);  // a literal fixed:... policy
  const std::vector<std::string> runs = def->runs(context_);
  if (!def->oracle_sweep && runs.size() == 1) {
    StatusOr<json> r = RunTrain(runs[0], name);
    if (r.ok()) measured_[runs[0]] = *r;
    return r;
  }

  const auto start = std::chrono::steady_clock::now();
  json sweep = json::array();
  std::map<std::string, bool> done;
  auto run_one = [&](const std::string& policy) -> Status {
    if (done[policy]) return absl::OkStatus();
    done[policy] = true;
    if (auto it = measured_.find(policy); it != measured_.end()) {
      json reused = it->second;
      reused["reused"] = true;  // measured by an earlier policy of this bench
      sweep.push_back(std::move(reused));
      return absl::OkStatus();
    }
    // A sweep's run that lasts twice as long as the fastest run so far measures under half
    // its rate: it can be neither the oracle's pick nor one of the two pairs pass 2 explores,
    // so it is stopped there (a read=local plan on a slow link had run for 300 s, most of a
    // scenario's sweep, to measure 82 samples/s beside 1495).
    const SweepRunLimit limit = def->oracle_sweep ? OracleRunLimit(sweep) : SweepRunLimit{};
    const double cap_s = limit.limit_s;
    StatusOr<json> r = RunTrain(policy, name, cap_s);
    if (r.ok()) measured_[policy] = *r;
    if (!r.ok()) {
      if (g_signal.load() != 0) return r.status();
      if (cap_s > 0 && absl::IsDeadlineExceeded(r.status()) && cap_s < options_.run_timeout_s) {
        sweep.push_back(
            {{"policy_arg", policy},
             {"error", absl::StrFormat("stopped after %.1f s, twice the fastest run so far (%s): "
                                       "under half its rate",
                                       cap_s, limit.fastest)}});
        return absl::OkStatus();
      }
      // A combination that does not work here (e.g. a read mode the workers cannot serve)
      // is recorded and skipped.
      sweep.push_back({{"policy_arg", policy}, {"error", std::string(r.status().message())}});
      return absl::OkStatus();
    }
    sweep.push_back(*r);
    return absl::OkStatus();
  };
  for (const std::string& p : runs) SLUICE_RETURN_IF_ERROR(run_one(p));
  // All-local is the grid's ratio 0: counted when `none` ran before.
  if (def->oracle_sweep && measured_.count("none")) SLUICE_RETURN_IF_ERROR(run_one("none"));
  if (def->oracle_sweep) {
    // Pass 2: the two best (cut, read) pairs at 0.25 / 0.75 / 1.0, then the best point
    // refined by +-0.1 and +-0.05.
    const auto best_point = [&]() -> std::optional<Placement> {
      std::optional<Placement> out;
      double rate = -1;
      for (const json& r : sweep) {
        if (!r.contains("samples_per_s") || !r.contains("policy_arg")) continue;
        StatusOr<Placement> p = ParsePlacement(r["policy_arg"].get<std::string>());
        if (!p.ok() || r["samples_per_s"].get<double>() <= rate) continue;
        rate = r["samples_per_s"].get<double>();
        out = *p;
      }
      return out;
    };
    std::vector<std::pair<double, Placement>> ranked;
    for (const json& r : sweep) {
      if (!r.contains("samples_per_s") || !r.contains("policy_arg")) continue;
      StatusOr<Placement> p = ParsePlacement(r["policy_arg"].get<std::string>());
      if (p.ok()) ranked.push_back({r["samples_per_s"].get<double>(), *p});  // none has no cut
    }
    std::sort(ranked.begin(), ranked.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t k = 0; k < ranked.size() && k < 2; ++k) {
      for (const double ratio : {0.25, 0.75, 1.0}) {
        SLUICE_RETURN_IF_ERROR(
            run_one(Fixed(ranked[k].second.cut, ratio, ranked[k].second.read_mode)));
      }
    }
    for (const double step : {0.1, 0.05}) {
      const std::optional<Placement> at = best_point();
      if (!at) break;
      for (const double ratio : {at->ratio - step, at->ratio + step}) {
        if (ratio <= 0 || ratio > 1.0 + 1e-9) continue;
        SLUICE_RETURN_IF_ERROR(run_one(Fixed(at->cut, std::min(1.0, ratio), at->read_mode)));
      }
    }
    // The codecs, at the best point: compression is part of the plans the planners choose.
    if (const std::optional<Placement> at = best_point()) {
      for (const Codec codec : {Codec::kLz4, Codec::kZstd}) {
        Placement p = *at;
        p.codec = codec;
        SLUICE_RETURN_IF_ERROR(run_one(PlacementString(p)));
      }
    }
  }
  const json* best = nullptr;
  for (const json& r : sweep) {
    if (!r.contains("samples_per_s")) continue;
    if (best == nullptr ||
        r["samples_per_s"].get<double>() > (*best)["samples_per_s"].get<double>()) {
      best = &r;
    }
  }
  if (best == nullptr)
    return absl::InternalError(absl::StrCat(name, ": no run of the sweep succeeded"));
  json out = *best;
  if (def->oracle_sweep) {
    // The best of some thirty short runs is biased upwards (the winner's curse): its plan
    // runs once more, and the oracle reports the mean of the two.
    const std::string again_policy = out.value("policy_arg", std::string());
    StatusOr<json> again = RunTrain(again_policy, name);
    if (!again.ok() && g_signal.load() != 0) return again.status();
    if (again.ok() && again->contains("samples_per_s")) {
      const double a = out["samples_per_s"].get<double>();
      const double b = (*again)["samples_per_s"].get<double>();
      out["samples_per_s_runs"] = {a, b};
      out["samples_per_s"] = (a + b) / 2;
      if (again->contains("stall_fraction") && out.contains("stall_fraction")) {
        out["stall_fraction"] =
            (out["stall_fraction"].get<double>() + (*again)["stall_fraction"].get<double>()) / 2;
      }
    }
  }
  out["time_to_plan_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (json& r : sweep) r.erase("train");
  out["sweep"] = sweep;
  if (def->oracle_sweep) {
    out["pruning"] =
        "pass 1: every cut (1..ops, batch) x read mode at ratio 0.5; pass 2: the two best "
        "(cut, read mode) pairs at ratios 0.25, 0.75, 1.0, then the best point +-0.1 and "
        "+-0.05, then the best point with lz4 and zstd; grid points measured by an earlier "
        "policy of the same bench (none = ratio 0, full = batch/remote/1.0) are reused; a run "
        "lasting twice as long as the fastest so far is stopped (under half its rate); the "
        "best point runs once more and samples_per_s is the mean of its two runs";
  }
  return out;
}

StatusOr<json> BenchRunner::Run() {
  // Leftovers of a crashed run first.
  StatusOr<testbed::Resources> removed = testbed::CleanLeftovers();
  if (!removed.ok()) return removed.status();
  if (!removed->empty()) {
    std::fprintf(stderr, "sluice bench: removed leftovers of an earlier run: %s\n",
                 removed->ToString().c_str());
  }
  std::error_code ec;
  fs::create_directories(options_.work_dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create ", options_.work_dir));
  empty_dir_ = options_.work_dir + "/empty";
  fs::create_directories(empty_dir_, ec);

  StatusOr<pipeline::PipelineSpec> spec = pipeline::LoadSpec(scenario_.ResolvePipelinePath());
  if (!spec.ok()) return spec.status();
  context_.num_ops = static_cast<int>(spec->ops.size());
  for (const testbed::WorkerScenario& w : scenario_.workers) {
    context_.workers_have_storage =
        context_.workers_have_storage && w.storage != StorageKind::kNone;
  }

  json report;
  report["scenario"] = {{"name", scenario_.name},
                        {"file", scenario_.file},
                        {"pipeline", scenario_.pipeline},
                        {"trainer_cpus", scenario_.trainer_cpus},
                        {"accelerator_ms", scenario_.accelerator_ms},
                        {"steps", scenario_.steps},
                        {"data",
                         {{"kind", scenario_.data_kind},
                          {"count", scenario_.data_count},
                          {"seed", scenario_.data_seed},
                          {"shards", scenario_.data_shards}}}};
  if (!scenario_.more_trainers.empty()) {
    json trainers = json::array({{{"cpus", scenario_.trainer_cpus}, {"start_s", 0.0}}});
    for (const testbed::TrainerScenario& t : scenario_.more_trainers) {
      trainers.push_back({{"cpus", t.cpus}, {"start_s", t.start_s}});
    }
    report["scenario"]["trainers"] = trainers;
  }
  report["scenario"]["store"] = scenario_.store == testbed::StoreAt::kTrainer   ? "trainer"
                                : scenario_.store == testbed::StoreAt::kWorkers ? "workers"
                                                                                : "none";
  report["scenario"]["workers"] = json::array();
  for (const testbed::WorkerScenario& w : scenario_.workers) {
    std::string storage = w.storage == StorageKind::kShared ? "shared"
                          : w.storage == StorageKind::kNone ? "none"
                                                            : "slow";
    report["scenario"]["workers"].push_back({{"cpus", w.cpus},
                                             {"bandwidth_bps", w.bandwidth_bps},
                                             {"latency_ms", w.latency_s * 1e3},
                                             {"storage", storage},
                                             {"storage_bytes_per_s", w.storage_bytes_per_s}});
  }
  report["scenario"]["events"] = json::array();
  for (const testbed::ScenarioEvent& e : scenario_.events) {
    json je = {{"at_s", e.at_s}, {"worker", e.worker}};
    if (e.cpus) je["cpus"] = *e.cpus;
    if (e.kill) je["kill"] = true;
    report["scenario"]["events"].push_back(je);
  }

  if (options_.hold_s <= 0) SLUICE_RETURN_IF_ERROR(GenerateData());
  if (g_signal.load() != 0) return Interrupted();

  SLUICE_ASSIGN_OR_RETURN(testbed_, Testbed::Create(scenario_.ToTestbedSpec()));
  for (const std::string& w : testbed_->warnings()) {
    std::fprintf(stderr, "sluice bench: warning: %s\n", w.c_str());
  }
  report["testbed"] = {
      {"run_id", testbed_->run_id()},
      {"cgroup", testbed_->cgroup_version() == testbed::CgroupVersion::kV2 ? "v2" : "v1"},
      {"warnings", testbed_->warnings()}};
  if (options_.verify) {
    std::fprintf(stderr, "sluice bench: verifying links and CPU quotas\n");
    SLUICE_ASSIGN_OR_RETURN(json measured, testbed::VerifyTestbed(*testbed_));
    for (const json& l : measured["links"]) {
      std::fprintf(stderr, "  link w%d: spec %.1f Mbit/s, measured %.1f Mbit/s%s\n",
                   l["worker"].get<int>(), l["spec_bps"].get<double>() / 1e6,
                   l["measured_bps"].get<double>() / 1e6, l["ok"].get<bool>() ? "" : "  (off)");
    }
    for (const auto& [host, c] : measured["cpus"].items()) {
      std::fprintf(stderr, "  cpu %s: spec %.2f, measured %.2f%s\n", host.c_str(),
                   c["spec_cpus"].get<double>(), c["measured_cpus"].get<double>(),
                   c["ok"].get<bool>() ? "" : "  (off)");
    }
    report["testbed"]["measured"] = measured;
  } else {
    report["testbed"]["measured"] = json::object();
  }
  if (g_signal.load() != 0) return Interrupted();

  if (options_.hold_s > 0) {
    // For tests and manual experiments: the testbed stands until the time is up or a signal.
    std::fprintf(stderr, "sluice bench: testbed %s up, holding %.0f s\n",
                 testbed_->run_id().c_str(), options_.hold_s);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.hold_s);
    while (std::chrono::steady_clock::now() < until) {
      if (g_signal.load() != 0) return Interrupted();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    report["policies"] = json::object();
    return report;
  }

  SLUICE_RETURN_IF_ERROR(StartStores());
  SLUICE_RETURN_IF_ERROR(StartWorkers());
  report["policies"] = json::object();
  for (const std::string& name : options_.policies) {
    // A policy named again (`sluice,sluice`: the second run plans from the metric store the
    // first left) is reported as "sluice#2", "sluice#3", ...
    std::string key = name;
    for (int k = 2; report["policies"].contains(key); ++k) key = absl::StrCat(name, "#", k);
    const PolicyDef* def = nullptr;
    for (const PolicyDef& d : Policies()) {
      if (name == d.name) def = &d;
    }
    StatusOr<json> result = RunPolicy(def, name);
    if (!result.ok()) {
      if (g_signal.load() != 0) return result.status();
      std::fprintf(stderr, "sluice bench: %s failed: %s\n", name.c_str(),
                   std::string(result.status().message()).c_str());
      report["policies"][key] = {{"error", std::string(result.status().message())}};
      continue;
    }
    // The run's decisions stay (what ran when); the rest of the train report is in the work
    // directory.
    if (result->contains("train") && (*result)["train"].contains("timeline")) {
      (*result)["timeline"] = (*result)["train"]["timeline"];
    }
    result->erase("train");
    std::fprintf(stderr, "sluice bench: %s: %.1f samples/s, stall %.1f%%\n", name.c_str(),
                 (*result)["samples_per_s"].get<double>(),
                 100 * (*result)["stall_fraction"].get<double>());
    if (result->contains("trainers")) {
      std::string each;
      for (const json& t : (*result)["trainers"]) {
        absl::StrAppend(&each, each.empty() ? "" : ", ", t["trainer"].get<std::string>(), " ",
                        absl::StrFormat("%.1f", t["samples_per_s"].get<double>()));
      }
      std::fprintf(stderr, "sluice bench: %s: %s; fairness (Jain) %.3f\n", name.c_str(),
                   each.c_str(), (*result)["fairness_jain"].get<double>());
    }
    if (result->contains("events")) {
      for (const json& e : (*result)["events"]) {
        if (e["t_s"].get<double>() < 0) {
          // FastFlow's profiling runs come before its training loop.
          std::fprintf(stderr,
                       "sluice bench: %s: the event came %.1f s before the training loop "
                       "started; %.1f samples/s from %.0f s after it\n",
                       name.c_str(), -e["t_s"].get<double>(),
                       e["settled_samples_per_s"].get<double>(), e["settle_s"].get<double>());
          continue;
        }
        std::fprintf(stderr,
                     "sluice bench: %s: event at %.1f s: %.1f samples/s before, %.1f from "
                     "%.0f s after it to the end\n",
                     name.c_str(), e["t_s"].get<double>(),
                     e["before_samples_per_s"].get<double>(),
                     e["settled_samples_per_s"].get<double>(), e["settle_s"].get<double>());
      }
    }
    report["policies"][key] = *result;
  }
  return report;
}

}  // namespace

void StartBenchSignalThread() { StartSignalThread(); }

int BenchSignal() { return g_signal.load(); }

std::vector<std::string> BenchPolicyNames() {
  std::vector<std::string> names;
  for (const PolicyDef& d : Policies()) names.push_back(d.name);
  return names;
}

StatusOr<json> RunBench(const BenchOptions& options, Scenario scenario) {
  BenchRunner runner(options, std::move(scenario));
  return runner.Run();  // the runner tears the testbed down as it goes out of scope
}

// "none,full,fixed:cut=2,ratio=0.5,oracle" -> {"none", "full", "fixed:cut=2,ratio=0.5",
// "oracle"}: a word with '=' continues the fixed:... before it, unless it starts a new
// fixed:... itself.
std::vector<std::string> SplitBenchPolicies(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    std::string p(part);
    if (!out.empty() && p.find('=') != std::string::npos && p.rfind("fixed:", 0) != 0 &&
        out.back().rfind("fixed:", 0) == 0) {
      absl::StrAppend(&out.back(), ",", p);
    } else {
      out.push_back(p);
    }
  }
  return out;
}

EventWindows MeasureEventWindows(const std::vector<double>& step_end_s,
                                 const std::vector<int64_t>& step_samples, double event_t_s,
                                 double settle_s, double before_s) {
  EventWindows w;
  w.t_s = event_t_s;
  const double end = step_end_s.empty() ? 0 : step_end_s.back();
  w.before_samples_per_s = runtime::WindowSamplesPerS(step_end_s, step_samples,
                                                      event_t_s - before_s, event_t_s);
  if (end > event_t_s + settle_s) {
    w.settled_samples_per_s =
        runtime::WindowSamplesPerS(step_end_s, step_samples, event_t_s + settle_s, end);
  }
  for (double from = event_t_s - before_s; from + 1 <= end; from += 1) {
    w.per_s.push_back(runtime::WindowSamplesPerS(step_end_s, step_samples, from, from + 1));
  }
  return w;
}

}  // namespace sluice::testbed
