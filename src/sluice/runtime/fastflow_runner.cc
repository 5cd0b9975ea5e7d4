#include "sluice/runtime/fastflow_runner.h"

#include <sys/resource.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/core/clock.h"
#include "sluice/runtime/profiler.h"
#include "sluice/runtime/train.h"

namespace sluice::runtime {
namespace {

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

LoaderOptions RunLoaderOptions(const policy::FastFlowProfilingRun& run,
                               const FastFlowRunnerOptions& options) {
  LoaderOptions o = options.base;
  o.workers.clear();
  o.resume = nullptr;
  o.worker_shares.clear();
  o.spill_over = false;
  if (run.kind != policy::FastFlowProfilingRun::Kind::kCandidate) {
    o.ratio = 0;
    o.cut = 0;
    return o;
  }
  for (int i = 0; i < run.num_workers && i < static_cast<int>(options.workers.size()); ++i) {
    o.workers.push_back(options.workers[i]);
  }
  return WithPlacement(std::move(o), run.placement);
}

}  // namespace

LoaderOptions FastFlowLoaderOptions(const policy::Plan& plan,
                                    const FastFlowRunnerOptions& options) {
  LoaderOptions o = options.base;
  o.workers.clear();
  o.spill_over = false;  // its counters wait for the side whose turn it is
  if (!plan.offload || plan.ratio <= 0) {
    o.ratio = 0;
    o.cut = 0;
    return o;
  }
  for (const std::string& address : plan.worker_addresses) {
    for (const rpc::ConnectOptions& c : options.workers) {
      if (c.address == address) o.workers.push_back(c);
    }
  }
  Placement placement = plan;
  placement.worker_shares.clear();  // equal: FastFlow assumes identical workers
  return WithPlacement(std::move(o), placement);
}

StatusOr<FastFlowOutcome> RunFastFlowProfiling(const pipeline::PipelineSpec& spec,
                                               const FastFlowRunnerOptions& options) {
  const int64_t start = NowNanos();
  FastFlowOutcome out;
  const int num_ops = static_cast<int>(spec.ops.size());
  const bool first_reads = pipeline::FirstOpReadsSample(spec);
  // Can the workers read the data themselves? (FastFlow assumes shared storage; where there
  // is none, it is given the one candidate that works rather than a failed run.)
  policy::FastFlowOptions ff = options.fastflow;
  if (const std::string check = StorageCheckPath(spec); !check.empty() && !options.workers.empty()) {
    for (const std::optional<rpc::LinkProbe>& p :
         ProbeWorkers(rpc::ConnectorOr(options.base.connector), options.workers, nullptr, check)) {
      if (p.has_value() && p->can_read == false) ff.workers_read = false;
    }
  }
  const std::vector<policy::FastFlowProfilingRun> runs = policy::FastFlowProfilingRuns(
      num_ops, first_reads, spec.batch.size > 0 && !options.base.shard.sharded(),
      static_cast<int>(options.workers.size()), ff);
  out.metrics.num_ops = num_ops;
  for (const rpc::ConnectOptions& w : options.workers) {
    out.metrics.worker_addresses.push_back(w.address);
  }
  // Profiling trains on the data as often as it needs.
  pipeline::PipelineSpec repeated = spec;
  repeated.epochs = -1;

  bool phase2 = false;
  for (const policy::FastFlowProfilingRun& run : runs) {
    if (run.phase == 2 && !phase2) break;
    FastFlowRunRecord rec;
    rec.run = run;
    // A candidate that cannot run here (no storage on the workers, a batch over the message
    // limit) is recorded with its error and left out of the decision; the other runs must
    // work. True: skip it; false: the whole profiling fails with `failed`.
    const auto skip_candidate = [&](const Status& failed) {
      if (run.kind != policy::FastFlowProfilingRun::Kind::kCandidate) return false;
      rec.error = std::string(failed.message());
      if (options.log) options.log(absl::StrCat("fastflow: ", run.label, ": ", rec.error));
      out.runs.push_back(std::move(rec));
      return true;
    };
    const int64_t run_start = NowNanos();
    StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(repeated, RunLoaderOptions(run, options));
    if (!loader.ok()) {
      if (skip_candidate(loader.status())) continue;
      return loader.status();
    }
    TrainOptions t;
    t.steps = run.steps + run.warmup_steps;
    t.warmup_steps = run.warmup_steps;
    t.accelerator_ms = options.accelerator_ms;
    t.repeat_first_batch = run.kind == policy::FastFlowProfilingRun::Kind::kModelOnly;
    double cpu_at_warmup = ProcessCpuSeconds();
    t.on_step = [&](const TrainProgress& p) {
      if (p.steps == run.warmup_steps) cpu_at_warmup = ProcessCpuSeconds();
    };
    StatusOr<TrainResult> trained = RunTraining(**loader, t);
    const double cpu_end = ProcessCpuSeconds();
    (*loader)->Cancel();
    loader->reset();
    if (!trained.ok()) {
      if (skip_candidate(trained.status())) continue;
      return trained.status();
    }
    rec.samples_per_s = trained->steady_samples_per_s();
    rec.cpu_s = cpu_end - cpu_at_warmup;
    rec.wall_s = (NowNanos() - run_start) / 1e9;
    switch (run.kind) {
      case policy::FastFlowProfilingRun::Kind::kModelOnly:
        out.metrics.gthp = rec.samples_per_s;
        break;
      case policy::FastFlowProfilingRun::Kind::kAllLocal:
        out.metrics.lthp = rec.samples_per_s;
        out.metrics.pcycle = rec.cpu_s;
        break;
      case policy::FastFlowProfilingRun::Kind::kCandidate: {
        policy::FastFlowCandidateMetrics& c =
            out.metrics.candidates[static_cast<int>(run.candidate)];
        c.measured = true;
        c.rthp = rec.samples_per_s;
        c.ocycle = rec.cpu_s;
        break;
      }
    }
    if (options.log) {
      options.log(absl::StrFormat("fastflow: %s: %.1f samples/s, %.2f CPU s (%.1f s)", run.label,
                                  rec.samples_per_s, rec.cpu_s, rec.wall_s));
    }
    out.runs.push_back(std::move(rec));
    if (run.phase == 1) phase2 = policy::FastFlowDetectsBottleneck(out.metrics, options.fastflow);
  }
  out.decision = policy::PlanFastFlow(out.metrics, options.fastflow);
  out.profiling_s = (NowNanos() - start) / 1e9;
  return out;
}

}  // namespace sluice::runtime
