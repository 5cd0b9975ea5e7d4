#include "sluice/runtime/policy_runner.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "sluice/core/clock.h"
#include "sluice/rpc/worker_names.h"
#include "sluice/runtime/auto_loader.h"
#include "sluice/runtime/fastflow_runner.h"

namespace sluice::runtime {
namespace {

// fastflow without a known step: batches taken all-local before the step counts (start-up),
// then the steps measured before the profiling runs.
constexpr int64_t kFastFlowWarmupBatches = 1;
constexpr int64_t kFastFlowMeasuredSteps = 8;

nlohmann::json LocalPlanJson(nlohmann::json j) {
  j["cut"] = nullptr;
  j["read_mode"] = nullptr;
  j["ratio"] = 0.0;
  j["compression"] = "none";
  j["workers"] = nlohmann::json::array();
  return j;
}

// The plan a planner chose, in the shape of a fixed one plus the planner's fields.
nlohmann::json PlannedJson(const std::string& policy, const policy::Plan& plan) {
  nlohmann::json j = plan.offload ? PlacementToJson(plan, plan.worker_addresses)
                                  : LocalPlanJson(nlohmann::json::object());
  j["policy"] = policy;
  j["planner"] = plan.planner;
  j["offload"] = plan.offload;
  j["policy_string"] = plan.PolicyString();
  j["predicted_samples_per_s"] = plan.predicted_samples_per_s;
  j["predicted_local_samples_per_s"] = plan.predicted_local_samples_per_s;
  j["explanation"] = plan.explanation;
  return j;
}

// The "decision: ..." line of an explanation (the whole of it when there is none).
std::string DecisionLine(const std::string& explanation) {
  for (absl::string_view line : absl::StrSplit(explanation, '\n')) {
    if (absl::StartsWith(line, "decision: ")) return std::string(line);
  }
  return explanation;
}

nlohmann::json FastFlowProfileJson(const FastFlowOutcome& outcome,
                                   policy::FastFlowRatioFormula formula) {
  nlohmann::json runs = nlohmann::json::array();
  for (const FastFlowRunRecord& r : outcome.runs) {
    runs.push_back({{"label", r.run.label},
                    {"phase", r.run.phase},
                    {"steps", r.run.steps},
                    {"warmup_steps", r.run.warmup_steps},
                    {"samples_per_s", r.samples_per_s},
                    {"cpu_s", r.cpu_s},
                    {"wall_s", r.wall_s},
                    {"error", r.error}});
  }
  nlohmann::json candidates = nlohmann::json::array();
  for (int i = 0; i < policy::kFastFlowCandidates; ++i) {
    const policy::FastFlowCandidateMetrics& c = outcome.metrics.candidates[i];
    candidates.push_back(
        {{"name", policy::FastFlowCandidateName(static_cast<policy::FastFlowCandidate>(i))},
         {"measured", c.measured},
         {"rthp", c.rthp},
         {"ocycle", c.ocycle},
         {"score", outcome.decision.scores[i]}});
  }
  return {{"fastflow",
           {{"gthp", outcome.metrics.gthp},
            {"lthp", outcome.metrics.lthp},
            {"pcycle", outcome.metrics.pcycle},
            {"candidates", candidates},
            {"bottleneck", outcome.decision.bottleneck},
            {"upper", outcome.decision.upper},
            {"lower", outcome.decision.lower},
            {"branch", outcome.decision.branch},
            {"formula", policy::FastFlowRatioFormulaName(formula)},
            {"runs", runs},
            {"profiling_s", outcome.profiling_s}}}};
}

int64_t SamplesOf(const Element& e) {
  return e.members.empty() ? 1 : static_cast<int64_t>(e.members.size());
}

}  // namespace

nlohmann::json RunnerReport::PlanJson() const {
  if (plan.has_value()) return PlannedJson(policy, *plan);
  if (parsed.name != "fixed") {
    nlohmann::json j;
    j["policy"] = parsed.name;
    return LocalPlanJson(std::move(j));
  }
  // The shares in force, as the Loader reports them.
  Placement placement = parsed;
  placement.worker_shares.clear();
  std::vector<std::string> addresses;
  for (const WorkerReport& w : loader.workers) {
    addresses.push_back(w.address);
    placement.worker_shares.push_back(w.share);
  }
  nlohmann::json j = PlacementToJson(placement, addresses);
  j["policy"] = parsed.name;
  return j;
}

nlohmann::json TimelineEntryJson(const policy::TimelineEntry& entry) {
  nlohmann::json j = policy::ToJson(entry);
  if (j.contains("plan") && j["plan"].is_object()) j["plan"].erase("candidates");
  return j;
}

nlohmann::json RunnerReport::TimelineJson() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const policy::TimelineEntry& e : timeline) entries.push_back(TimelineEntryJson(e));
  return entries;
}

std::string DescribeDecision(const policy::TimelineEntry& entry) {
  const policy::Plan& p = entry.plan;
  const std::string kind = entry.kind == policy::DecisionKind::kInitial
                               ? std::string("initial plan")
                               : absl::StrCat(policy::DecisionKindName(entry.kind), ", plan");
  std::string what = "all local";
  if (p.offload) {
    what = absl::StrFormat("cut=%s, ratio %.2f, %s, compress %s, spill %s, on", CutName(p.cut),
                           p.ratio, ReadModeName(p.read_mode), CodecName(p.codec),
                           p.local_spill_over ? "all" : "workers");
    for (size_t i = 0; i < p.worker_addresses.size(); ++i) {
      absl::StrAppend(&what, i > 0 ? "," : "", " ", p.worker_addresses[i],
                      absl::StrFormat(" (%.2f)", i < p.worker_shares.size() ? p.worker_shares[i]
                                                                            : 0.0));
    }
    absl::StrAppend(&what, absl::StrFormat(", predicted %.1f samples/s (all local %.1f)",
                                           p.predicted_samples_per_s,
                                           p.predicted_local_samples_per_s));
  }
  const std::string reason = std::string(*absl::StrSplit(entry.reason, '\n').begin());
  std::string out = absl::StrFormat("%s: %s at %.2f s", kind, what, entry.t_s);
  if (!reason.empty()) absl::StrAppend(&out, ": ", reason);
  if (!p.offload) absl::StrAppend(&out, " (", DecisionLine(p.explanation), ")");
  return out;
}

PolicyRunner::PolicyRunner(pipeline::PipelineSpec spec, RunnerOptions options)
    : spec_(std::move(spec)), options_(std::move(options)) {}

PolicyRunner::~PolicyRunner() {
  Cancel();
  auto_.reset();
  loader_.reset();
}

void PolicyRunner::Log(const std::string& message) const { LogNote(options_.log, message); }

StatusOr<std::unique_ptr<PolicyRunner>> PolicyRunner::Open(const pipeline::PipelineSpec& spec,
                                                           RunnerOptions options) {
  std::unique_ptr<PolicyRunner> r(new PolicyRunner(spec, std::move(options)));
  RunnerOptions& o = r->options_;
  r->policy_text_ = o.policy.ToString();
  // Workers by name ("dns:NAME:PORT", "file:PATH") become one worker per address; a planning
  // run looks them up again while it trains (AutoOptions::worker_names).
  std::vector<rpc::ConnectOptions> names;
  if (rpc::NamesWorkers(o.workers)) names = o.workers;
  SLUICE_ASSIGN_OR_RETURN(rpc::ExpandedWorkers expanded, rpc::ExpandWorkerNames(o.workers));
  for (const std::string& note : expanded.notes) r->Log(note);
  o.workers = std::move(expanded.workers);
  const std::string& name = o.policy.name;
  if ((name == "fixed" || name == "fastflow") && o.workers.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy '", r->policy_text_, "' needs workers (none were given)"));
  }
  if (name == "sluice" && o.workers.empty() && !names.empty()) {
    r->Log(absl::StrCat("policy ", r->policy_text_,
                        ": no worker is listed yet; everything runs in this process until one "
                        "is (the names are looked up again every few seconds)"));
  } else if (name == "sluice" && o.policy.is_auto && o.workers.empty()) {
    r->local_reason_ = absl::StrCat("policy ", r->policy_text_,
                                    ": no workers given, so everything runs in this process");
    r->Log(r->local_reason_);
    o.policy = TrainPolicy();
  }
  LoaderOptions base = o.base;
  base.workers.clear();
  base.cut = 0;
  base.ratio = 0;
  if (o.policy.name == "sluice") {
    AutoOptions ao;
    ao.workers = o.workers;
    ao.worker_names = names;
    ao.base = base;
    ao.measure_s = o.measure_s;
    ao.batches_after_plan = o.batches_after_plan;
    if (o.measure_batches > 0) ao.measure_batches = o.measure_batches;
    ao.apply_plans = o.apply_plans;
    ao.closed_loop = o.apply_plans;
    ao.metric_store = o.metric_store;
    PolicyRunner* self = r.get();
    ao.log = [self](const std::string& m) { self->Log(m); };
    ao.log_decisions = o.on_decision == nullptr;
    ao.on_decision = o.on_decision;
    SLUICE_ASSIGN_OR_RETURN(r->auto_, AutoLoader::Create(r->spec_, std::move(ao)));
    return r;
  }
  if (o.policy.name == "fastflow") {
    SLUICE_RETURN_IF_ERROR(r->OpenFastFlow());
    return r;
  }
  if (o.policy.name == "fixed") {
    base.workers = o.workers;
    base = WithPlacement(std::move(base), o.policy);
  }
  r->loader_options_ = base;
  SLUICE_ASSIGN_OR_RETURN(r->loader_, Loader::Create(r->spec_, std::move(base)));
  return r;
}

Status PolicyRunner::OpenFastFlow() {
  if (options_.accelerator_ms >= 0) return PlanFastFlow();
  // The step is the consumer's: measured on its first batches, with the local pipeline.
  LoaderOptions local = options_.base;
  local.workers.clear();
  local.cut = 0;
  local.ratio = 0;
  loader_options_ = local;
  SLUICE_ASSIGN_OR_RETURN(loader_, Loader::Create(spec_, std::move(local)));
  return absl::OkStatus();
}

Status PolicyRunner::PlanFastFlow() {
  FastFlowRunnerOptions fo;
  fo.workers = options_.workers;
  fo.base = options_.base;
  fo.base.workers.clear();
  fo.accelerator_ms = options_.accelerator_ms >= 0 ? options_.accelerator_ms : min_step_ns_ / 1e6;
  if (options_.policy.fastflow_code) {
    fo.fastflow.formula = policy::FastFlowRatioFormula::kReleasedCode;
  }
  if (options_.fastflow_steps > 0) {
    fo.fastflow.profile_steps = static_cast<int>(options_.fastflow_steps);
    fo.fastflow.warmup_steps = static_cast<int>(std::max<int64_t>(1, options_.fastflow_steps / 10));
  }
  fo.log = [this](const std::string& m) { Log(m); };
  SLUICE_ASSIGN_OR_RETURN(FastFlowOutcome outcome, RunFastFlowProfiling(spec_, fo));
  fastflow_plan_ = outcome.decision.plan;
  profile_ = FastFlowProfileJson(outcome, fo.fastflow.formula);
  if (options_.accelerator_ms < 0) profile_["fastflow"]["measured_step_ms"] = fo.accelerator_ms;
  // Where the consumer already took batches, the plan's Loader goes on from there.
  if (loader_ != nullptr) {
    fo.base.resume = std::make_shared<const pipeline::SourceProgress>(loader_->Progress());
    loader_->Cancel();
    AddLoaderReport(retired_, loader_->Report());
    loader_.reset();
  }
  loader_options_ = FastFlowLoaderOptions(*fastflow_plan_, fo);
  loader_options_.resume = nullptr;  // later passes resume where they start
  LoaderOptions planned = loader_options_;
  planned.resume = fo.base.resume;
  SLUICE_ASSIGN_OR_RETURN(loader_, Loader::Create(spec_, std::move(planned)));
  const int64_t now = NowNanos();
  time_to_plan_s_ = t0_ns_ >= 0 ? (now - t0_ns_) / 1e9 : outcome.profiling_s;
  policy::TimelineEntry entry;
  entry.t_s = t0_ns_ >= 0 ? (now - t0_ns_) / 1e9 : outcome.profiling_s;
  entry.kind = policy::DecisionKind::kInitial;
  entry.reason = absl::StrCat(
      "FastFlow's profiling runs (", outcome.runs.size(), " runs, ",
      absl::StrFormat("%.1f", outcome.profiling_s), " s",
      options_.accelerator_ms < 0 ? absl::StrFormat(", a measured step of %.2f ms", fo.accelerator_ms)
                                  : std::string(),
      ") and Algorithm 1: ", outcome.decision.branch);
  entry.plan = *fastflow_plan_;
  timeline_.push_back(entry);
  if (options_.on_decision) {
    options_.on_decision(entry);
  }
  return absl::OkStatus();
}

Status PolicyRunner::GetNext(Element* out, bool* end_of_stream) {
  return Next(out, end_of_stream, nullptr);
}

Status PolicyRunner::GetNext(Element* out, bool* end_of_stream, const ConsumerTimes& times) {
  return Next(out, end_of_stream, &times);
}

Status PolicyRunner::Next(Element* out, bool* end_of_stream, const ConsumerTimes* times) {
  const int64_t entered = options_.metrics != nullptr ? NowNanos() : 0;
  Status s = NextBatch(out, end_of_stream, times);
  if (options_.metrics != nullptr && s.ok() && !*end_of_stream) {
    RecordMetrics(entered, times, *out);
  }
  return s;
}

void PolicyRunner::RecordMetrics(int64_t entered_ns, const ConsumerTimes* times,
                                 const Element& batch) {
  const int64_t now = NowNanos();
  // The consumer asked at `asked`; it had been computing since it took the previous batch.
  const int64_t asked = times != nullptr ? times->asked_ns : entered_ns;
  const int64_t took = times != nullptr ? times->took_previous_ns : last_return_ns_;
  options_.metrics->Observe(now - asked, took >= 0 ? asked - took : -1, SamplesOf(batch));
  last_return_ns_ = now;
  if (!options_.metrics->ReportDue(now)) return;
  const RunnerReport r = Report();
  std::map<std::string, int64_t> decisions;
  for (const policy::TimelineEntry& e : r.timeline) ++decisions[policy::DecisionKindName(e.kind)];
  options_.metrics->SetReport(r.parsed.name, r.loader, r.plan, decisions);
}

Status PolicyRunner::NextBatch(Element* out, bool* end_of_stream, const ConsumerTimes* times) {
  if (auto_ != nullptr) {
    return times != nullptr ? auto_->GetNext(out, end_of_stream, *times)
                            : auto_->GetNext(out, end_of_stream);
  }
  const bool measuring = options_.policy.name == "fastflow" && !fastflow_plan_.has_value();
  if (measuring) {
    const int64_t asked = times != nullptr ? times->asked_ns : NowNanos();
    const int64_t took = times != nullptr ? times->took_previous_ns : last_took_ns_;
    if (t0_ns_ < 0) t0_ns_ = asked;
    if (took >= 0 && batches_ > kFastFlowWarmupBatches) {
      const int64_t step = asked - took;
      if (step > 0 && (min_step_ns_ == 0 || step < min_step_ns_)) min_step_ns_ = step;
    }
    if (batches_ >= kFastFlowWarmupBatches + kFastFlowMeasuredSteps) {
      SLUICE_RETURN_IF_ERROR(PlanFastFlow());
    }
  }
  SLUICE_RETURN_IF_ERROR(loader_->GetNext(out, end_of_stream));
  if (measuring && !*end_of_stream) {
    batches_ += SamplesOf(*out) > 0 ? 1 : 0;
    last_took_ns_ = NowNanos();
  }
  return absl::OkStatus();
}

void PolicyRunner::Cancel() {
  if (auto_ != nullptr) auto_->Cancel();
  if (loader_ != nullptr) loader_->Cancel();
}

Status PolicyRunner::Finish() { return auto_ != nullptr ? auto_->Finish() : absl::OkStatus(); }

Status PolicyRunner::NextPass(int64_t epochs,
                              std::shared_ptr<const pipeline::SourceProgress> resume) {
  spec_.epochs = epochs;
  if (auto_ != nullptr) return auto_->NextPass(epochs, std::move(resume));
  LoaderOptions o = loader_options_;
  o.resume = std::move(resume);
  // The new Loader first: when it cannot start, the old one (at its end) stays.
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Loader> next, Loader::Create(spec_, std::move(o)));
  loader_->Cancel();
  AddLoaderReport(retired_, loader_->Report());
  loader_ = std::move(next);
  last_return_ns_ = -1;
  last_took_ns_ = -1;
  return absl::OkStatus();
}

bool PolicyRunner::settled() const {
  if (auto_ != nullptr) return auto_->planned();
  return options_.policy.name != "fastflow" || fastflow_plan_.has_value();
}

RunnerReport PolicyRunner::Report() const {
  RunnerReport r;
  r.policy = policy_text_;
  r.parsed = options_.policy;
  r.local_reason = local_reason_;
  if (auto_ != nullptr) {
    AutoReport a = auto_->Report();
    r.loader = std::move(a.loader);
    r.plan = std::move(a.plan);
    r.timeline = std::move(a.timeline);
    r.time_to_plan_s = a.time_to_plan_s;
    if (a.profile.has_value()) r.profile["measured"] = policy::ToJson(*a.profile);
    r.measured = std::move(a.profile);
    if (!r.timeline.empty()) {
      nlohmann::json candidates = nlohmann::json::array();
      for (const policy::Evaluation& e : r.timeline.front().plan.candidates) {
        candidates.push_back(policy::ToJson(e));
      }
      r.profile["candidates"] = candidates;
    }
    r.profile["metric_store"] = {{"path", a.store_path},
                                 {"note", a.store_note},
                                 {"costs_from_store", a.costs_from_store}};
    r.profile["loaders_created"] = a.loaders_created;
  } else {
    r.loader = retired_;
    if (loader_ != nullptr) AddLoaderReport(r.loader, loader_->Report());
    r.plan = fastflow_plan_;
    r.timeline = timeline_;
    r.time_to_plan_s = time_to_plan_s_;
    r.profile = profile_;
  }
  if (r.local_reason.empty() && r.plan.has_value() && !r.plan->offload &&
      !r.plan->explanation.empty()) {
    r.local_reason = absl::StrCat("policy ", policy_text_, ": ", DecisionLine(r.plan->explanation));
  }
  return r;
}

pipeline::SourceProgress PolicyRunner::Progress() const {
  return auto_ != nullptr ? auto_->Progress() : loader_->Progress();
}

const Schema& PolicyRunner::output_schema() const {
  return auto_ != nullptr ? auto_->output_schema() : loader_->output_schema();
}

int64_t PolicyRunner::samples_per_epoch() const {
  return auto_ != nullptr ? auto_->samples_per_epoch() : loader_->samples_per_epoch();
}

}  // namespace sluice::runtime
