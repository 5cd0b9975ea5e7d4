// `sluice train PIPELINE.yaml`: a training loop with an emulated accelerator, fed by the
// Loader: locally, offloading to workers under a fixed plan, or under a planner — `sluice`
// (`auto`, the default: measure, plan, switch, keep adapting) or the FastFlow baseline.
// Reports throughput, the prep-stall fraction, where the samples were processed, the plan in
// force at the end and, for the planners, every decision (the timeline) and what was measured.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "sluice/core/sample_digests.h"
#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/cli/progress.h"
#include "sluice/cli/report.h"
#include "sluice/core/clock.h"
#include "sluice/metrics/http_server.h"
#include "sluice/pipeline/spec.h"
#include "sluice/policy/controller.h"
#include "sluice/policy/metric_store.h"
#include "sluice/rpc/grpc_worker_server.h"
#include "sluice/rpc/tls_files.h"
#include "sluice/runtime/policy_runner.h"
#include "sluice/runtime/train.h"

namespace sluice::cli {
namespace {

// SIGINT/SIGTERM end the training loop before its next step: the report is still printed
// and written, and the exit status is 128 + the signal's number. A second signal kills as
// usual (SA_RESETHAND), for a loop stuck waiting on its data.
volatile sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int sig) { g_stop_signal = sig; }

void CatchStopSignals() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A parent that blocked them (a runner waiting in sigwait) passes the mask on.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

constexpr const char* kCommand = "train";

std::string Percent(int64_t part, int64_t whole) {
  return absl::StrFormat("%.1f%%", whole > 0 ? 100.0 * part / whole : 0.0);
}

}  // namespace

int TrainCommand(const std::vector<std::string>& args) {
  std::string workers_flag;
  std::string token_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string policy_text = "auto";
  std::string metric_store = "";
  int64_t fastflow_steps = 0;
  double measure_s = 2.0;
  double accelerator_ms = 0;
  int64_t steps = 0;
  int64_t epochs = 0;
  int64_t threads = 0;
  std::string files;
  std::string json_path;
  std::string events_path;
  double connect_timeout_s = 5;
  double session_weight = 1;
  bool dump_checksum = false;

  FlagParser flags(kCommand,
                   "PIPELINE.yaml [--workers HOST:PORT,...] [--token-file F] [--tls-ca F "
                   "[--tls-cert F --tls-key F]] [--policy P] --accelerator-ms MS --steps N "
                   "[--threads N] [--files GLOB] [--metric-store DIR|off] "
                   "[--rank R --world-size N] [--json OUT]");
  flags.AddString("workers", &workers_flag, "HOST:PORT,...", "the `sluice worker`s to use; also dns:NAME:PORT (every address of NAME) and "
                  "file:PATH (HOST:PORT lines), looked up again while --policy sluice/auto "
                  "trains");
  flags.AddString("token-file", &token_file, "F", "send the bearer token in F to the workers");
  flags.AddString("tls-ca", &tls_ca, "F", "connect with TLS, trusting the CA certificate in F");
  flags.AddString("tls-cert", &tls_cert, "F", "client certificate for mutual TLS");
  flags.AddString("tls-key", &tls_key, "F", "private key of --tls-cert");
  flags.AddString("policy", &policy_text, "P",
                  "auto | sluice | fastflow | fastflow:code | none | "
                  "fixed:cut=K,ratio=R[,read=local|remote][,compress=lz4|zstd|none] "
                  "(K: ops run where the sample is assigned, or batch)");
  flags.AddString("metric-store", &metric_store, "DIR|off",
                  "where sluice/auto keep measured costs between runs (default: "
                  "$XDG_CACHE_HOME/sluice or ~/.cache/sluice; off: none)");
  flags.AddDouble("measure-s", &measure_s, "S",
                  "sluice/auto: seconds of all-local training measured before the first plan",
                  0.1, 600);
  flags.AddInt("fastflow-steps", &fastflow_steps, "N",
               "fastflow: steps per profiling run (0: FastFlow's 100, after 10 warm-up steps; "
               "else N after max(1, N/10))",
               0, 1000000);
  flags.AddDouble("accelerator-ms", &accelerator_ms, "MS",
                  "emulated accelerator time per step (a sleep)", 0, 1e7);
  flags.AddInt("steps", &steps, "N", "training steps (0: until the data ends)", 0);
  flags.AddInt("threads", &threads, "N",
               "local pipeline threads (0: the spec's options.threads, else the CPU budget)", 0,
               pipeline::SpecLimits::kMaxThreads);
  flags.AddInt("epochs", &epochs, "N",
               "override the spec's epochs (-1: repeat until --steps; 0: as the spec says)", -1,
               1000000);
  flags.AddString("files", &files, "GLOB",
                  "override source.files (source.shards in a shards spec; \"**\" crosses folders)");
  flags.AddString("json", &json_path, "OUT", "also write the report as JSON to OUT (- : stdout)");
  flags.AddString("events", &events_path, "OUT",
                  "append progress and each planner decision to OUT as they happen (JSON lines)");
  flags.AddDouble("connect-timeout", &connect_timeout_s, "S",
                  "seconds to wait for a worker at start", 0.05, 600);
  flags.AddDouble("session-weight", &session_weight, "W",
                  "this trainer's weight where workers divide their CPU between the trainers "
                  "they serve (default 1: equal shares)",
                  0.001, rpc::kMaxSessionWeight);
  // For tests: per-sample content digests in SampleId order on stdout (core/sample_digests.h); the
  // summary then goes to stderr.
  flags.AddBool("dump-checksum", &dump_checksum, "print per-sample digests", /*hidden=*/true);
  std::string metrics_listen;
  bool check_flags = false;
  flags.AddString("metrics-listen", &metrics_listen, "HOST:PORT",
                  "serve Prometheus metrics on http://HOST:PORT/metrics while training");
  flags.AddBool("check-flags", &check_flags,
                "parse and check the flags, then exit 0 without training (deployment checks)");
  ShardFlags shard_flags;
  AddShardFlags(flags, &shard_flags);

  if (std::optional<int> stop = ParsePipelineCommand(kCommand, flags, args)) return *stop;
  if (json_path == "-" && dump_checksum) {
    return UsageError(kCommand, "--json - and --dump-checksum both want stdout", flags.Usage());
  }
  if ((!tls_cert.empty() || !tls_key.empty()) && (tls_cert.empty() || tls_key.empty())) {
    return UsageError(kCommand, "--tls-cert and --tls-key go together", flags.Usage());
  }
  if (!tls_cert.empty() && tls_ca.empty()) {
    return UsageError(kCommand, "--tls-cert needs --tls-ca", flags.Usage());
  }
  StatusOr<pipeline::Shard> shard = ShardFromFlags(flags, shard_flags);
  if (!shard.ok()) {
    return UsageError(kCommand, std::string(shard.status().message()), flags.Usage());
  }
  if (check_flags) {
    // Only what the flags say: the files they name may live on another machine.
    std::printf("sluice %s: flags ok\n", kCommand);
    return kExitOk;
  }
  // An unreadable credential is the user's mistake, not a worker being down: say so now
  // rather than going on without the workers.
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"--tls-ca", &tls_ca},
                                   {"--tls-cert", &tls_cert},
                                   {"--tls-key", &tls_key}}) {
    if (!path->empty() && access(path->c_str(), R_OK) != 0) {
      std::fprintf(stderr, "sluice %s: %s: cannot read '%s': %s\n", kCommand, flag,
                   path->c_str(), std::strerror(errno));
      return kExitUsage;
    }
  }
  // A file that is not PEM, or a key that is not the certificate's, makes gRPC fail every
  // connection without saying why: name it now.
  if (!tls_ca.empty()) {
    Status tls = rpc::CheckPemCertificates(tls_ca, "--tls-ca");
    if (tls.ok() && !tls_cert.empty()) {
      tls = rpc::CheckPemKeyPair(tls_cert, "--tls-cert", tls_key, "--tls-key");
    }
    if (!tls.ok()) return ReportError(kCommand, tls);
  }

  std::optional<pipeline::PipelineSpec> loaded = LoadPipelineForCommand(kCommand, flags, files);
  if (!loaded) return kExitUsage;
  pipeline::PipelineSpec spec = *std::move(loaded);
  if (epochs != 0) spec.epochs = epochs;
  if (steps == 0 && spec.epochs < 0) {
    return UsageError(kCommand, "the pipeline repeats forever (epochs: -1): give --steps",
                      flags.Usage());
  }

  StatusOr<runtime::TrainPolicy> parsed =
      runtime::ParsePolicy(policy_text, static_cast<int>(spec.ops.size()));
  if (!parsed.ok()) {
    return UsageError(kCommand, std::string(parsed.status().message()), flags.Usage());
  }
  runtime::TrainPolicy policy = *parsed;

  std::vector<std::string> addresses;
  for (absl::string_view a : absl::StrSplit(workers_flag, ',', absl::SkipWhitespace())) {
    addresses.emplace_back(a);
  }
  if ((policy.name == "fixed" || policy.name == "fastflow") && addresses.empty()) {
    return UsageError(kCommand, absl::StrCat("--policy ", policy.name, " needs --workers"),
                      flags.Usage());
  }
  if (policy.name == "none" && !addresses.empty()) {
    std::fprintf(stderr, "sluice %s: --policy none: the workers are not used\n", kCommand);
  }

  runtime::RunnerOptions ro;
  ro.policy = policy;
  ro.base.threads = static_cast<int>(threads);
  ro.base.session_weight = session_weight;
  ro.base.shard = *shard;
  if (policy.name != "none") {
    std::string token;
    if (!token_file.empty()) {
      StatusOr<std::string> read = rpc::ReadTokenFile(token_file);
      if (!read.ok()) return ReportError(kCommand, read.status());
      token = *read;
    }
    for (const std::string& address : addresses) {
      rpc::ConnectOptions c;
      c.address = address;
      c.token = token;
      c.tls_ca_file = tls_ca;
      c.tls_cert_file = tls_cert;
      c.tls_key_file = tls_key;
      c.connect_timeout_s = connect_timeout_s;
      ro.workers.push_back(std::move(c));
    }
  }
  ro.measure_s = measure_s;
  if (metric_store != "off") {
    policy::MetricStoreOptions mo;
    mo.dir = metric_store;
    ro.metric_store = mo;
  }
  ro.accelerator_ms = accelerator_ms;
  ro.fastflow_steps = fastflow_steps;
  // The planning steps come on top of --steps (runtime::TrainOptions::settled).
  ro.batches_after_plan = steps;

  const int64_t start = NowNanos();
  ProgressLine progress(stderr, isatty(STDERR_FILENO) == 1, start);
  SampleDigests digests;
  runtime::TrainOptions train;
  train.steps = steps;
  train.accelerator_ms = accelerator_ms;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> events(nullptr, &std::fclose);
  if (!events_path.empty()) {
    events.reset(std::fopen(events_path.c_str(), "a"));
    if (events == nullptr) {
      std::fprintf(stderr, "sluice %s: --events: cannot open '%s': %s\n", kCommand,
                   events_path.c_str(), std::strerror(errno));
      return kExitUsage;
    }
  }
  // --events: a progress line at most every kEventIntervalS (and the decisions and worker
  // events, below): twice a second places a fault or a stop within half a second of progress
  // for a watcher, at a few hundred bytes a second. Worker events come from the Loader's
  // threads, hence the lock.
  constexpr double kEventIntervalS = 0.5;
  int64_t next_event_ns = 0;
  std::mutex events_mu;
  const auto write_event = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(events_mu);
    std::fprintf(events.get(), "%s\n", line.c_str());
    std::fflush(events.get());
  };
  train.on_step = [&](const runtime::TrainProgress& p) {
    const int64_t now = NowNanos();
    if (events != nullptr && now >= next_event_ns) {
      next_event_ns = now + static_cast<int64_t>(kEventIntervalS * 1e9);
      write_event(absl::StrFormat(R"({"event":"progress","t_s":%.3f,"steps":%d,"samples":%d})",
                                  p.elapsed_s, p.steps, p.samples));
    }
    if (!progress.Due(now)) return;
    progress.Update(
        now, absl::StrFormat("train: step %d%s, %d samples, %.1f samples/s, stall %.0f%%, %.1f s",
                             p.steps, steps > 0 ? absl::StrCat("/", steps) : "", p.samples,
                             p.elapsed_s > 0 ? p.samples / p.elapsed_s : 0.0,
                             p.elapsed_s > 0 ? 100 * p.stall_s / p.elapsed_s : 0.0, p.elapsed_s));
  };
  if (dump_checksum) train.on_batch = [&](const Element& batch) { digests.Add(batch); };
  CatchStopSignals();
  train.stop = [] { return g_stop_signal != 0; };
  ro.log = [&](const std::string& message) {
    progress.Finish();
    std::fprintf(stderr, "sluice %s: %s\n", kCommand, message.c_str());
  };
  ro.on_decision = [&](const policy::TimelineEntry& entry) {
    ro.log(absl::StrFormat("%.2f s: %s: %s (%s)", entry.t_s, policy::DecisionKindName(entry.kind),
                           entry.plan.PolicyString(), entry.reason));
    if (events == nullptr) return;
    nlohmann::json j = runtime::TimelineEntryJson(entry);
    j["event"] = "decision";
    write_event(j.dump());
  };
  if (events != nullptr) {
    // A worker failing, hung, draining or drained: {"event": "worker", "kind": ...}.
    ro.base.on_worker_event = [&](const runtime::WorkerEvent& e) {
      nlohmann::json j;
      j["event"] = "worker";
      j["kind"] = runtime::WorkerEventKindName(e.kind);
      j["t_s"] = (NowNanos() - start) / 1e9;
      j["address"] = e.address;
      j["requeued_samples"] = e.requeued_samples;
      if (e.kind == runtime::WorkerEvent::Kind::kDraining) j["deadline_s"] = e.deadline_s;
      if (!e.message.empty()) j["message"] = e.message;
      write_event(j.dump());
    };
  }

  // --metrics-listen: served from before the first plan (planning is part of what to watch).
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (!metrics_listen.empty()) {
    ro.metrics = std::make_shared<runtime::TrainerMetrics>();
    auto started = metrics::MetricsServer::Start(
        metrics_listen, [m = ro.metrics] { return m->Families(); });
    if (!started.ok()) return ReportError(kCommand, started.status());
    metrics_server = *std::move(started);
    ro.log(absl::StrCat("metrics on http://", metrics_server->address(), "/metrics"));
  }

  StatusOr<std::unique_ptr<runtime::PolicyRunner>> opened =
      runtime::PolicyRunner::Open(spec, ro);
  if (!opened.ok()) return ReportError(kCommand, opened.status());
  std::unique_ptr<runtime::PolicyRunner> runner = *std::move(opened);
  const uint64_t per_epoch = static_cast<uint64_t>(runner->samples_per_epoch());
  if (shard->sharded()) ro.log(pipeline::DescribeShard(*shard, spec.source.even, per_epoch));
  // --steps counts from the plan: the steady figures measure the plan chosen, and the time it
  // took to choose it is time_to_plan_s.
  train.settled = [&runner] { return runner->settled(); };
  StatusOr<runtime::TrainResult> ran = runtime::RunTraining(*runner, train);
  progress.Finish();
  if (!ran.ok()) {
    std::fprintf(stderr, "sluice %s: %s\n", kCommand, std::string(ran.status().message()).c_str());
    return kExitRuntime;
  }
  const runtime::TrainResult result = *ran;
  runner->Cancel();
  if (Status saved = runner->Finish(); !saved.ok()) {
    ro.log(absl::StrCat("warning: metric store: ", saved.message()));
  }
  const runtime::RunnerReport ran_report = runner->Report();
  runner.reset();
  const runtime::LoaderReport& report = ran_report.loader;
  const std::optional<policy::Plan>& planned = ran_report.plan;
  const double time_to_plan_s = ran_report.time_to_plan_s.value_or(planned ? result.wall_s : 0);

  // The human summary.
  FILE* out = dump_checksum ? stderr : stdout;
  int64_t processed = report.samples_local;
  for (const runtime::WorkerReport& w : report.workers) processed += w.samples;
  std::string where = absl::StrCat("local ", report.samples_local, " (",
                                   Percent(report.samples_local, processed), ")");
  for (const runtime::WorkerReport& w : report.workers) {
    absl::StrAppend(&where, ", ", w.address, " ", w.samples, " (", Percent(w.samples, processed),
                    ", ", FormatBytes(static_cast<double>(w.bytes_received)), " received",
                    w.shared_memory ? " through shared memory"
                    : w.bulk        ? " on the bulk channel"
                                    : "",
                    w.failures > 0 ? absl::StrCat(", ", w.failures, " failures") : "",
                    w.hangs > 0 ? absl::StrCat(" of which ", w.hangs, " hung") : "",
                    w.drains == 1  ? ", drained"
                    : w.drains > 1 ? absl::StrCat(", drained ", w.drains, " times")
                                   : "",
                    ")");
  }
  std::fprintf(out,
               "train: %lld steps, %lld samples in %.2f s: %.1f samples/s, stall %.1f%% "
               "(%.2f s waiting for data, %.2f s stepping)%s\n",
               static_cast<long long>(result.steps), static_cast<long long>(result.samples),
               result.wall_s, result.samples_per_s(), 100 * result.stall_fraction(), result.stall_s,
               result.compute_s,
               result.data_ended ? " [the data ended before --steps]"
               : result.stopped  ? absl::StrCat(" [stopped by ", strsignal(g_stop_signal), "]").c_str()
                                 : "");
  if (planned.has_value()) {
    std::fprintf(out, "plan: %s -> %s\n", policy.ToString().c_str(),
                 planned->PolicyString().c_str());
    for (const policy::TimelineEntry& e : ran_report.timeline) {
      std::fprintf(out, "  %.2f s %s: %s\n", e.t_s, policy::DecisionKindName(e.kind),
                   e.reason.c_str());
    }
    std::fprintf(out, "time to plan: %.2f s\n", time_to_plan_s);
  } else {
    std::fprintf(out, "plan: %s\n", policy.ToString().c_str());
  }
  std::fprintf(out, "processed: %s\n", where.c_str());
  std::fprintf(out, "duplicates dropped %lld, re-queued %lld, skipped %lld\n",
               static_cast<long long>(report.duplicates_dropped),
               static_cast<long long>(report.requeued_samples),
               static_cast<long long>(report.skipped));
  if (report.shuffle_buffer_peak_samples > 0) {
    std::fprintf(out, "shuffle buffer: at most %lld samples, %s\n",
                 static_cast<long long>(report.shuffle_buffer_peak_samples),
                 FormatBytes(static_cast<double>(report.shuffle_buffer_peak_bytes)).c_str());
  }
  if (dump_checksum) std::fputs(digests.ToString().c_str(), stdout);
  std::fflush(stdout);

  if (!json_path.empty()) {
    nlohmann::json j;
    j["command"] = "train";
    j["samples_per_s"] = result.samples_per_s();
    j["stall_fraction"] = result.stall_fraction();
    // After the planning and warm-up steps: what a sweep compares (start-up costs are the
    // same for all; planning is reported as time_to_plan_s).
    j["steady"] = {{"warmup_steps", result.warmup_steps},
                   {"planning_steps", result.planning_steps},
                   {"samples", result.steady_samples},
                   {"wall_s", result.steady_wall_s},
                   {"samples_per_s", result.steady_samples_per_s()},
                   {"stall_fraction", result.steady_stall_fraction()}};
    j["plan"] = ran_report.PlanJson();
    j["timeline"] = ran_report.TimelineJson();
    j["profile"] = ran_report.profile;
    j["time_to_plan_s"] = time_to_plan_s;
    j["progress"] = {{"start_unix_s", result.start_unix_s},
                     {"step_end_s", result.step_end_s},
                     {"samples", result.step_samples}};
    j["wall_s"] = result.wall_s;
    j["stall_s"] = result.stall_s;
    j["compute_s"] = result.compute_s;
    j["steps"] = result.steps;
    j["samples"] = result.samples;
    j["accelerator_ms"] = accelerator_ms;
    j["threads"] = report.threads;
    j["data_ended"] = result.data_ended;
    j["stopped_by"] = result.stopped ? nlohmann::json(strsignal(g_stop_signal)) : nlohmann::json();
    j["fingerprint"] = pipeline::Fingerprint(spec);
    const uint64_t per_rank = pipeline::SamplesPerRank(per_epoch, *shard, spec.source.even);
    const uint64_t world = static_cast<uint64_t>(shard->world_size);
    j["shard"] = {{"rank", shard->rank},
                  {"world_size", shard->world_size},
                  {"even", spec.source.even == pipeline::EvenRule::kPad ? "pad" : "drop"},
                  {"samples_per_epoch", per_rank},
                  {"dropped_per_epoch", per_epoch - std::min(per_epoch, per_rank * world)},
                  {"padded_per_epoch", per_rank * world - std::min(per_epoch, per_rank * world)}};
    nlohmann::json workers = nlohmann::json::array();
    for (const runtime::WorkerReport& w : report.workers) {
      workers.push_back({{"address", w.address},
                         {"samples", w.samples},
                         {"bytes_received", w.bytes_received},
                         {"cpu_share", w.cpu_share},
                         {"read_cpu_ns", w.read_cpu_ns},
                         {"decode_cpu_ns", w.decode_cpu_ns},
                         {"connected", w.connected},
                         {"bulk", w.bulk},
                         {"shared_memory", w.shared_memory},
                         {"shared_slots", w.shared_slots},
                         {"failures", w.failures},
                         {"drains", w.drains},
                         {"hangs", w.hangs},
                         {"last_hang_silence_s", w.last_hang_silence_s}});
    }
    j["places"] = {{"local", report.samples_local}, {"workers", workers}};
    j["samples_local"] = report.samples_local;
    j["duplicates_dropped"] = report.duplicates_dropped;
    j["requeued_samples"] = report.requeued_samples;
    j["skipped"] = report.skipped;
    j["batches_in_place"] = report.batches_in_place;
    j["shuffle_buffer_peak_samples"] = report.shuffle_buffer_peak_samples;
    j["shuffle_buffer_peak_bytes"] = report.shuffle_buffer_peak_bytes;
    j["warnings"] = report.warnings;
    Status written = WriteOutput(json_path, j.dump(2) + "\n");
    if (!written.ok()) {
      std::fprintf(stderr, "sluice %s: %s\n", kCommand, std::string(written.message()).c_str());
      return kExitRuntime;
    }
  }
  return result.stopped ? 128 + g_stop_signal : kExitOk;
}

}  // namespace sluice::cli
