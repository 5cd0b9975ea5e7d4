// `sluice plan PIPELINE.yaml --workers LIST`: profiles briefly — a few seconds of the local
// pipeline feeding an emulated accelerator at the given step time, and each worker's GetInfo
// and link probe — then prints what was measured, every candidate placement's predicted rate
// and the plan the sluice planner chooses, with its explanation. Nothing is offloaded.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "sluice/cli/commands.h"
#include "sluice/cli/flags.h"
#include "sluice/cli/report.h"
#include "sluice/core/clock.h"
#include "sluice/pipeline/spec.h"
#include "sluice/policy/model.h"
#include "sluice/policy/plan.h"
#include "sluice/policy/sluice_planner.h"
#include "sluice/rpc/grpc_worker_server.h"
#include "sluice/runtime/policy_runner.h"

namespace sluice::cli {
namespace {

constexpr const char* kCommand = "plan";

std::string Ms(double s) { return absl::StrFormat("%.3f ms", s * 1e3); }

// What was measured, in words.
std::string DescribeProfile(const policy::Profile& p, double measured_s) {
  std::string out = absl::StrFormat("measured over %.1f s of the local pipeline:\n", measured_s);
  const double demand = p.consumer.DemandSamplesPerS();
  absl::StrAppend(
      &out,
      absl::StrFormat("  trainer: %.2f CPUs; accelerator: %s per batch of %d (demand %s "
                      "samples/s); stall %.1f%%\n",
                      p.trainer_cpu_budget, Ms(p.consumer.step_s), p.consumer.batch_size,
                      demand >= policy::kUnboundedRate || !(demand < 1e300)
                          ? std::string("unbounded")
                          : absl::StrFormat("%.1f", demand),
                      100 * p.consumer.stall_fraction));
  absl::StrAppend(&out, absl::StrFormat("  %-24s %14s %18s\n", "op", "CPU ms/sample",
                                        "bytes out/sample"));
  for (const policy::OpCost& op : p.costs.ops) {
    absl::StrAppend(&out, absl::StrFormat("  %-24s %14.3f %18s\n", op.name,
                                          op.cpu_s_per_sample * 1e3,
                                          FormatBytes(op.bytes_out_per_sample)));
  }
  absl::StrAppend(&out, absl::StrFormat("  batching %.3f ms/sample, receiving %.2f ns/byte\n",
                                        p.costs.batch_cpu_s_per_sample * 1e3,
                                        p.costs.CostOf(Codec::kNone)
                                                .value_or(policy::CodecCost{})
                                                .trainer_cpu_s_per_byte *
                                            1e9));
  if (p.workers.empty()) absl::StrAppend(&out, "  no worker answered\n");
  for (const policy::WorkerProfile& w : p.workers) {
    absl::StrAppend(&out,
                    absl::StrFormat("  worker %s: %.2f CPUs, link %s/s, RTT %s\n", w.address,
                                    w.cpu_budget, FormatBytes(w.link_bytes_per_s), Ms(w.rtt_s)));
  }
  return out;
}

}  // namespace

int PlanCommand(const std::vector<std::string>& args) {
  std::string workers_flag;
  std::string token_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  double accelerator_ms = 0;
  double profile_s = 3;
  int64_t threads = 0;
  std::string files;
  std::string json_path;
  double connect_timeout_s = 5;

  FlagParser flags(kCommand,
                   "PIPELINE.yaml --workers HOST:PORT,... [--accelerator-ms MS] [--profile-s S] "
                   "[--threads N] [--files GLOB] [--token-file F] [--tls-ca F [--tls-cert F "
                   "--tls-key F]] [--json OUT]");
  flags.AddString("workers", &workers_flag, "HOST:PORT,...", "the `sluice worker`s to plan for");
  flags.AddDouble("accelerator-ms", &accelerator_ms, "MS",
                  "the accelerator's step time (0: as fast as the data comes)", 0, 1e7);
  flags.AddDouble("profile-s", &profile_s, "S", "seconds of the local pipeline to measure", 0.1,
                  600);
  flags.AddInt("threads", &threads, "N",
               "local pipeline threads (0: the spec's options.threads, else the CPU budget)", 0,
               pipeline::SpecLimits::kMaxThreads);
  flags.AddString("files", &files, "GLOB",
                  "override source.files (source.shards in a shards spec; \"**\" crosses folders)");
  flags.AddString("token-file", &token_file, "F", "send the bearer token in F to the workers");
  flags.AddString("tls-ca", &tls_ca, "F", "connect with TLS, trusting the CA certificate in F");
  flags.AddString("tls-cert", &tls_cert, "F", "client certificate for mutual TLS");
  flags.AddString("tls-key", &tls_key, "F", "private key of --tls-cert");
  flags.AddString("json", &json_path, "OUT",
                  "also write the profile, every candidate and the plan as JSON to OUT (- : stdout)");
  flags.AddDouble("connect-timeout", &connect_timeout_s, "S", "seconds to wait for a worker",
                  0.05, 600);
  if (std::optional<int> stop = ParsePipelineCommand(kCommand, flags, args)) return *stop;
  std::optional<pipeline::PipelineSpec> loaded = LoadPipelineForCommand(kCommand, flags, files);
  if (!loaded) return kExitUsage;
  pipeline::PipelineSpec spec = *std::move(loaded);
  spec.epochs = -1;  // measure for as long as asked, whatever the data set's size

  std::string token;
  if (!token_file.empty()) {
    StatusOr<std::string> read = rpc::ReadTokenFile(token_file);
    if (!read.ok()) return ReportError(kCommand, read.status());
    token = *read;
  }
  runtime::RunnerOptions ro;
  ro.policy.name = "sluice";
  for (absl::string_view a : absl::StrSplit(workers_flag, ',', absl::SkipWhitespace())) {
    rpc::ConnectOptions c;
    c.address = std::string(a);
    c.token = token;
    c.tls_ca_file = tls_ca;
    c.tls_cert_file = tls_cert;
    c.tls_key_file = tls_key;
    c.connect_timeout_s = connect_timeout_s;
    ro.workers.push_back(std::move(c));
  }
  ro.base.threads = static_cast<int>(threads);
  ro.measure_s = profile_s;
  ro.measure_batches = 3;
  ro.apply_plans = false;
  ro.log = [](const std::string& m) { std::fprintf(stderr, "sluice plan: %s\n", m.c_str()); };
  // The stall the model predicts stands in when the short run shows none (an accelerator
  // faster than the data, but prefetched batches hid it).
  StatusOr<std::unique_ptr<runtime::PolicyRunner>> opened = runtime::PolicyRunner::Open(spec, ro);
  if (!opened.ok()) return ReportError(kCommand, opened.status());
  std::unique_ptr<runtime::PolicyRunner> loader = *std::move(opened);
  std::fprintf(stderr, "sluice plan: measuring the local pipeline for %.1f s\n", profile_s);
  const int64_t start = NowNanos();
  const auto step = std::chrono::nanoseconds(static_cast<int64_t>(accelerator_ms * 1e6));
  while (!loader->settled()) {
    Element batch;
    bool end = false;
    Status s = loader->GetNext(&batch, &end);
    if (!s.ok()) return ReportError(kCommand, s);
    if (end) break;
    batch = Element();
    if (step.count() > 0) std::this_thread::sleep_for(step);
  }
  const double measured_s = (NowNanos() - start) / 1e9;
  loader->Cancel();
  runtime::RunnerReport report = loader->Report();
  loader.reset();
  if (!report.measured.has_value()) {
    std::fprintf(stderr, "sluice plan: the pipeline produced too little to measure\n");
    return kExitRuntime;
  }
  policy::Profile profile = *report.measured;
  // Nothing offloaded yet: the stall is the larger of the measured and the predicted one.
  profile.consumer.stall_fraction =
      std::max(profile.consumer.stall_fraction, policy::PredictedStallFraction(profile));
  policy::PlannerOptions po;
  po.allow_after_batch = spec.batch.size > 0;
  const policy::Plan plan = policy::PlanSluice(profile, po);

  std::printf("%s\n", DescribeProfile(profile, measured_s).c_str());
  std::printf("candidates:\n%s\n", policy::FormatCandidateTable(profile, plan).c_str());
  std::printf("plan: %s\n%s\n", plan.PolicyString().c_str(), plan.explanation.c_str());
  std::fflush(stdout);

  if (!json_path.empty()) {
    nlohmann::json j;
    j["command"] = "plan";
    j["measured_s"] = measured_s;
    j["profile"] = policy::ToJson(profile);
    j["plan"] = policy::ToJson(plan);
    j["policy"] = plan.PolicyString();
    Status written = WriteOutput(json_path, j.dump(2) + "\n");
    if (!written.ok()) return ReportError(kCommand, written);
  }
  return kExitOk;
}

}  // namespace sluice::cli
