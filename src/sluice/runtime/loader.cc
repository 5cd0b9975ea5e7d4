#include "sluice/runtime/loader.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sluice/core/clock.h"
#include "sluice/core/error_kind.h"
#include "sluice/core/cpu_budget.h"
#include "sluice/pipeline/batch.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/iterators.h"
#include "sluice/pipeline/map.h"
#include "sluice/pipeline/source.h"
#include "sluice/runtime/coordinator.h"
#include "sluice/runtime/merge.h"
#include "sluice/pipeline/segment.h"
#include "sluice/runtime/loader_impl.h"
#include "sluice/runtime/remote_link.h"

namespace sluice::runtime {

const char* WorkerEventKindName(WorkerEvent::Kind kind) {
  switch (kind) {
    case WorkerEvent::Kind::kFailed:
      return "failed";
    case WorkerEvent::Kind::kHung:
      return "hung";
    case WorkerEvent::Kind::kDraining:
      return "draining";
    case WorkerEvent::Kind::kDrained:
      return "drained";
  }
  return "unknown";
}

LoaderOptions WithPlacement(LoaderOptions base, const Placement& placement) {
  static_cast<Placement&>(base) = placement;
  return base;
}

PipelineShape PipelineShapeOf(const pipeline::PipelineSpec& spec) {
  PipelineShape shape;
  shape.num_ops = static_cast<int>(spec.ops.size());
  shape.has_batch = spec.batch.size > 0;
  shape.first_op_reads_file = pipeline::FirstOpReadsSample(spec);
  return shape;
}

namespace {

// An op that reports each element it fails on before returning the error, so the loader
// learns which samples a ParallelMap drops under on_error: skip.
class ReportingOp final : public ops::Op {
 public:
  ReportingOp(const ops::Op* inner, std::function<void(const Element&)> on_fail)
      : Op(&inner->schema(), inner->args(), inner->input_schema(), inner->output_schema()),
        inner_(inner),
        on_fail_(std::move(on_fail)) {}

  Status Apply(Element& element, const ops::OpContext& ctx) const override {
    Status status = inner_->Apply(element, ctx);
    if (!status.ok()) on_fail_(element);
    return status;
  }
  ops::Geometry geometry() const override { return inner_->geometry(); }
  ops::DecodeRequest NeededInput(const Element& element, const ops::OpContext& ctx,
                                 int64_t full_height, int64_t full_width) const override {
    return inner_->NeededInput(element, ctx, full_height, full_width);
  }

 private:
  const ops::Op* inner_;
  std::function<void(const Element&)> on_fail_;
};

Schema SchemaAfter(const pipeline::BuiltOps& built, int end) {
  return end == 0 ? built.input_schema : built.ops[end - 1]->output_schema();
}


Status CheckPlan(const pipeline::PipelineSpec& spec, const LoaderOptions& options) {
  SLUICE_RETURN_IF_ERROR(ValidatePlacement(options, PipelineShapeOf(spec)));
  if (!options.worker_shares.empty() && options.worker_shares.size() != options.workers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("got ", options.worker_shares.size(),
                                                   " worker shares for ", options.workers.size(),
                                                   " workers"));
  }
  if (options.max_open_splits < 1) {
    return absl::InvalidArgumentError("max_open_splits must be at least 1");
  }
  if (!(options.session_weight > 0 && options.session_weight <= rpc::kMaxSessionWeight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_weight ", options.session_weight,
                     " is out of range: it must be > 0 and at most ", rpc::kMaxSessionWeight));
  }
  SLUICE_RETURN_IF_ERROR(pipeline::CheckShard(options.shard));
  // A worker batches each split on its own, and splits end with their epoch: the batch count
  // would then depend on the plan, and the ranks must all yield the same count.
  if (options.shard.sharded() && options.cut == kCutAfterBatch && spec.batch.size > 0 &&
      !options.workers.empty() && options.ratio > 0) {
    return absl::InvalidArgumentError(
        "cut=batch is not available to a rank of a sharded run (world_size > 1): batches "
        "made per split would give the ranks different batch counts; cut before the batch");
  }
  return absl::OkStatus();
}

}  // namespace

void Loader::Impl::Warn(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(warn_mu);
    if (warnings.size() < kMaxWarnings) warnings.push_back(message);
  }
  if (options.warn) {
    options.warn(message);
  } else {
    std::fprintf(stderr, "sluice: warning: %s\n", message.c_str());
  }
}

void Loader::Impl::CancelAll() {
  stopping.store(true);
  if (coordinator != nullptr) coordinator->Cancel();
  if (merge != nullptr) merge->Cancel();
  for (auto& link : links) link->Cancel();
  if (root != nullptr) root->Cancel();
}

Loader::Impl::~Impl() {
  CancelAll();
  for (auto& link : links) link->Stop();
  if (prefix != nullptr) prefix->Cancel();
  if (pump.joinable()) pump.join();
  root.reset();    // joins the suffix threads
  prefix.reset();  // joins the prefix map's threads before the ops go away
  links.clear();
  local_ops.clear();
}

namespace {

// The whole pipeline in this process, built as pipeline::LocalExecutor builds it, with two
// additions: the source leaves out what options.resume marks consumed, and samples dropped
// under on_error: skip are reported to the progress tracker.
Status BuildLocal(Loader::Impl& d, const ops::Registry& registry) {
  // The spec's ranges were checked by Loader::Create (pipeline::CheckSpecRanges).
  const pipeline::PipelineSpec& spec = d.spec;
  const LoaderOptions& opt = d.options;
  d.local = true;
  SLUICE_ASSIGN_OR_RETURN(pipeline::SourceFiles files, pipeline::ResolveSource(spec.source));
  d.files = std::make_shared<const pipeline::SourceFiles>(std::move(files));
  d.per_epoch = pipeline::SamplesPerEpoch(*d.files, spec.take);
  SLUICE_RETURN_IF_ERROR(
      pipeline::CheckShard(opt.shard, spec.source.even, static_cast<uint64_t>(d.per_epoch)));
  d.progress.Init(static_cast<uint64_t>(d.per_epoch), spec.epochs, opt.shard, spec.source.even,
                  opt.resume.get());
  SLUICE_ASSIGN_OR_RETURN(pipeline::BuiltOps built,
                          pipeline::BuildOps(spec.ops, spec.source.seed, registry,
                                             pipeline::SourceSchema(spec.source), 0,
                                             pipeline::LocalEnv(spec.options.limits)));
  d.stats = std::make_unique<pipeline::PipelineStats>();
  d.stats->Init(built.names);

  pipeline::SourceOptions so;
  so.shuffle = spec.source.shuffle;
  so.seed = spec.source.seed;
  so.take = spec.take;
  so.epochs = spec.epochs;
  so.with_label = pipeline::HasLabel(spec.source);
  so.produced = &d.stats->source_samples;
  so.resume = opt.resume;
  so.shard = opt.shard;
  so.even = spec.source.even;
  so.shuffle_groups =
      pipeline::ShuffleGroups(spec.source, *d.files, static_cast<uint64_t>(d.per_epoch));
  std::unique_ptr<pipeline::Iterator> it =
      std::make_unique<pipeline::SourceIterator>(d.files, std::move(so));

  pipeline::SegmentOptions segment;
  segment.stages = pipeline::MakeStages(built, d.stats.get());
  segment.output_schema = built.output_schema;
  segment.threads = d.threads;
  segment.max_buffered_bytes = opt.max_buffered_bytes;
  segment.stats = d.stats.get();
  ProgressTracker* progress = &d.progress;
  segment.on_skip = [progress](const Element& e, const Status&) { progress->Mark(e.id); };
  SLUICE_ASSIGN_OR_RETURN(it, pipeline::AssembleSegment(spec, std::move(it), std::move(segment)));
  d.local_ops = std::move(built.ops);
  d.root = std::move(it);
  return absl::OkStatus();
}

}  // namespace

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

StatusOr<std::unique_ptr<Loader>> Loader::Create(const pipeline::PipelineSpec& spec,
                                                 LoaderOptions options,
                                                 const ops::Registry& registry) {
  SLUICE_RETURN_IF_ERROR(CheckPlan(spec, options));
  SLUICE_RETURN_IF_ERROR(pipeline::CheckSpecRanges(spec));
  if (options.threads > pipeline::SpecLimits::kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threads: must be in [1, ", pipeline::SpecLimits::kMaxThreads, "], got ", options.threads));
  }
  auto impl = std::make_unique<Impl>();
  Impl& d = *impl;
  d.spec = spec;
  d.options = std::move(options);
  const LoaderOptions& opt = d.options;
  {
    std::lock_guard<std::mutex> lock(d.plan_mu);
    d.ratio_now = opt.ratio;
    d.local_spill_over_now = opt.local_spill_over;
  }

  if (opt.threads > 0) {
    d.threads = opt.threads;
  } else if (spec.options.threads > 0) {
    d.threads = spec.options.threads;
  } else {
    d.threads = ProbeCpuBudget().threads();
  }

  if (opt.workers.empty() || opt.ratio <= 0) {
    SLUICE_RETURN_IF_ERROR(BuildLocal(d, registry));
    return std::unique_ptr<Loader>(new Loader(std::move(impl)));
  }

  const int num_ops = static_cast<int>(spec.ops.size());
  d.after_batch = opt.cut == kCutAfterBatch;
  d.prefix_end = d.after_batch ? num_ops : opt.cut;

  SLUICE_ASSIGN_OR_RETURN(pipeline::SourceFiles files, pipeline::ResolveSource(spec.source));
  d.files = std::make_shared<const pipeline::SourceFiles>(std::move(files));
  d.per_epoch = pipeline::SamplesPerEpoch(*d.files, spec.take);
  d.with_label = pipeline::HasLabel(spec.source) &&
                 d.files->labels.size() == d.files->paths.size();
  SLUICE_ASSIGN_OR_RETURN(d.built, pipeline::BuildOps(spec.ops, spec.source.seed, registry,
                                                      pipeline::SourceSchema(spec.source),
                                                      0, pipeline::LocalEnv(spec.options.limits)));
  d.stats = std::make_unique<pipeline::PipelineStats>();
  d.stats->Init(d.built.names);
  const pipeline::BatchOptions batch_options = pipeline::BatchOptionsOf(spec.batch);
  Schema merged_schema = SchemaAfter(d.built, d.prefix_end);
  if (d.after_batch) {
    SLUICE_ASSIGN_OR_RETURN(merged_schema, pipeline::BatchSchema(merged_schema, batch_options));
  }

  d.session.spec = spec;
  d.session.cut = opt.cut;
  d.session.read_mode = opt.read_mode;
  d.session.compression = opt.codec;
  d.session.max_inflight_bytes = opt.max_inflight_bytes;
  d.session.weight = opt.session_weight;
  // A cut at the pipeline's end leaves the batcher alone after the merge: then received
  // samples land in their batch's slots as they are read, and the local prefix's last op
  // writes into slots of its own, as all-local's does, so that batching either is no copy.
  // Only where the batcher may take a buffer's members out of turn (no shuffle buffer, not
  // deterministic: BatchOptions::order_free), which local and received samples mixed in one
  // batch need.
  const bool output_slots = !d.after_batch && d.prefix_end == num_ops && spec.batch.size > 0 &&
                            spec.shuffle_buffer == 0 && !spec.options.deterministic;
  if (output_slots) {
    d.session.land_slots = pipeline::BatchSlotsFor(merged_schema, spec.batch.size);
  }
  if (opt.read_mode == ReadMode::kLocalRead) {
    d.read_stage = pipeline::MakeStages(d.built, d.stats.get(), 0, 1);
  }

  // Splits: a multiple of the batch size after batch.
  uint64_t split_size = opt.split_size > 0 ? opt.split_size : kDefaultSplitSize;
  if (d.after_batch) {
    const uint64_t b = static_cast<uint64_t>(spec.batch.size);
    split_size = std::max<uint64_t>(1, (split_size + b - 1) / b) * b;
  }

  // Shares: 1 - ratio local, ratio split among the workers.
  const size_t num_workers = opt.workers.size();
  std::vector<double> worker_shares = opt.worker_shares;
  if (worker_shares.empty()) worker_shares.assign(num_workers, 1.0);
  double share_sum = 0;
  for (double s : worker_shares) share_sum += s;
  if (share_sum <= 0) worker_shares.assign(num_workers, 1.0), share_sum = num_workers;

  // Connect to every worker at once; the unreachable ones are reported and retried later.
  for (size_t i = 0; i < num_workers; ++i) {
    d.links.push_back(std::make_unique<RemoteLink>(&d, static_cast<int>(i + 1), opt.workers[i],
                                                   opt.ratio * worker_shares[i] / share_sum));
  }
  std::vector<Status> opened(num_workers);
  {
    std::vector<std::thread> connecting;
    for (size_t i = 0; i < num_workers; ++i) {
      connecting.emplace_back([&, i] { opened[i] = d.links[i]->OpenFirst(); });
    }
    for (std::thread& t : connecting) t.join();
  }
  for (size_t i = 0; i < num_workers; ++i) {
    if (opened[i].ok()) continue;
    // A spec the worker refuses is a mistake in the plan, not an outage.
    if (opened[i].code() == absl::StatusCode::kInvalidArgument) return opened[i];
    d.Warn(absl::StrCat("worker ", opt.workers[i].address,
                        " is unreachable; going on without it: ", opened[i].message()));
  }

  const int local_cap =
      static_cast<int>((2 * static_cast<uint64_t>(d.threads) + split_size - 1) / split_size) + 1;
  std::vector<ConsumerConfig> consumers;
  consumers.push_back(ConsumerConfig{"local", 1.0 - opt.ratio, local_cap, true,
                                     opt.local_spill_over});
  int total_cap = local_cap;
  for (size_t i = 0; i < num_workers; ++i) {
    consumers.push_back(ConsumerConfig{absl::StrCat("worker ", opt.workers[i].address),
                                       opt.ratio * worker_shares[i] / share_sum,
                                       opt.max_open_splits, opened[i].ok()});
    total_cap += opt.max_open_splits;
  }
  CoordinatorOptions co;
  co.samples_per_epoch = static_cast<uint64_t>(d.per_epoch);
  co.shuffle = spec.source.shuffle;
  co.seed = spec.source.seed;
  co.epochs = spec.epochs;
  co.split_size = split_size;
  co.resume = opt.resume;
  co.spill_over = opt.spill_over;
  co.shard = opt.shard;
  co.even = spec.source.even;
  // A split is a shard or a range of one wherever the order keeps shards whole.
  if (!spec.source.shuffle || spec.source.shard_order) {
    co.split_groups = pipeline::ShardGroups(*d.files, static_cast<uint64_t>(d.per_epoch));
    if (spec.source.shard_order) co.shuffle_groups = co.split_groups;
  }
  if (spec.options.deterministic) co.window = split_size * static_cast<uint64_t>(total_cap + 1);
  SLUICE_ASSIGN_OR_RETURN(d.coordinator, Coordinator::Create(co, std::move(consumers)));

  MergeOptions mo;
  mo.deterministic = spec.options.deterministic;
  mo.max_elements = 4 * static_cast<size_t>(d.threads) + 16;
  mo.max_bytes = opt.max_buffered_bytes / 4;
  d.merge = std::make_shared<Merge>(d.coordinator.get(), merged_schema,
                                    static_cast<int>(num_workers) + 1, mo);
  // Samples consumed before a resume count as released, so that an in-order merge does not
  // wait for them.
  d.progress.Init(static_cast<uint64_t>(d.per_epoch), spec.epochs, opt.shard, spec.source.even,
                  opt.resume.get());
  for (const SampleId& id : d.coordinator->ReservedSamples()) d.merge->Skip(id);

  // The local prefix.
  if (d.after_batch) {
    Impl* loader = &d;
    pipeline::BatchOptions local_batches = batch_options;
    local_batches.in_place = &d.stats->batches_in_place;
    d.batcher = std::make_unique<SplitBatcher>(
        d.merge.get(), [loader](SampleId id) { loader->SkipSample(id); },
        SchemaAfter(d.built, d.prefix_end), local_batches);
  }
  std::unique_ptr<pipeline::Iterator> prefix =
      std::make_unique<SplitSource>(d.coordinator.get(), d.files, d.with_label, d.batcher.get());
  if (d.prefix_end > 0) {
    std::vector<pipeline::MapStage> stages =
        pipeline::MakeStages(d.built, d.stats.get(), 0, d.prefix_end);
    if (spec.options.on_error == pipeline::OnError::kSkip) {
      Impl* loader = &d;
      SplitBatcher* batcher = d.batcher.get();
      auto on_fail = [loader, batcher](const Element& e) {
        if (batcher != nullptr) {
          batcher->Skip(e.id);
        } else {
          loader->SkipSample(e.id);
        }
      };
      for (pipeline::MapStage& stage : stages) {
        d.wrappers.push_back(std::make_unique<ReportingOp>(stage.op, on_fail));
        stage.op = d.wrappers.back().get();
      }
    }
    pipeline::SegmentOptions segment;
    segment.stages = std::move(stages);
    segment.output_schema = SchemaAfter(d.built, d.prefix_end);
    segment.threads = d.threads;
    segment.max_buffered_bytes = opt.max_buffered_bytes;
    segment.stats = d.stats.get();
    segment.shuffle_and_batch = false;  // the prefix feeds the merge, which orders
    segment.prefetch = false;
    segment.keep_order = false;
    // After the batch cut the batcher stacks the local samples as the map delivers them, and
    // at the pipeline's end the suffix's: they are written into their batch's slots, as
    // all-local's are.
    if (d.after_batch || output_slots) segment.batch_slots_size = spec.batch.size;
    SLUICE_ASSIGN_OR_RETURN(prefix, pipeline::AssembleSegment(spec, std::move(prefix),
                                                              std::move(segment)));
  }
  d.prefix = std::move(prefix);

  // The suffix.
  std::unique_ptr<pipeline::Iterator> it = std::make_unique<MergeReader>(d.merge);
  pipeline::SegmentOptions segment;
  segment.stages = pipeline::MakeStages(d.built, d.stats.get(), d.prefix_end, num_ops);
  segment.output_schema = d.built.output_schema;
  segment.threads = d.threads;
  segment.max_buffered_bytes = opt.max_buffered_bytes;
  segment.stats = d.stats.get();
  ProgressTracker* progress = &d.progress;  // already in the merge: only the tracker
  segment.on_skip = [progress](const Element& e, const Status&) { progress->Mark(e.id); };
  segment.shuffle_and_batch = !d.after_batch;  // after the batch cut, batches arrive made
  // Producers that fill slot buffers at once: the local prefix, the received samples landed
  // in slots, and each local worker writing into shared slots of its own (rpc/slot_arena.h).
  if (output_slots) segment.slot_streams = 2 + static_cast<int>(num_workers);
  SLUICE_ASSIGN_OR_RETURN(it, pipeline::AssembleSegment(spec, std::move(it), std::move(segment)));
  d.root = std::move(it);

  // Start the local pump and the workers' links.
  d.pump = std::thread([&d] {
    for (;;) {
      Element e;
      bool end = false;
      Status s = d.prefix->GetNext(&e, &end);
      if (!s.ok()) {
        if (!d.stopping.load()) d.merge->Fail(s);
        return;
      }
      if (end) return;
      if (d.batcher != nullptr) {
        d.batcher->Add(std::move(e));
      } else if (!d.merge->Push(0, std::move(e)).ok()) {
        return;
      }
    }
  });
  pthread_setname_np(d.pump.native_handle(), "sluice-pump");
  for (auto& link : d.links) link->Start();
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Status Loader::GetNext(Element* out, bool* end_of_stream) {
  Impl& d = *impl_;
  SLUICE_RETURN_IF_ERROR(d.root->GetNext(out, end_of_stream));
  if (*end_of_stream) {
    d.progress.Finish();
    return absl::OkStatus();
  }
  if (out->members.empty()) {
    d.progress.Mark(out->id);
  } else {
    for (const SampleId& id : out->members) d.progress.Mark(id);
  }
  const int64_t samples = out->members.empty() ? 1 : static_cast<int64_t>(out->members.size());
  d.samples_out.fetch_add(samples, std::memory_order_relaxed);
  d.batches_out.fetch_add(1, std::memory_order_relaxed);
  if (d.local) {
    d.stats->samples_out.fetch_add(samples, std::memory_order_relaxed);
    d.stats->batches_out.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void Loader::Cancel() { impl_->CancelAll(); }

Status Loader::SetShares(double ratio, const std::vector<double>& worker_shares) {
  Impl& d = *impl_;
  if (d.local || d.coordinator == nullptr) {
    return absl::FailedPreconditionError(
        "this Loader runs the local pipeline; offloading needs a new Loader");
  }
  if (!(ratio >= 0 && ratio <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("ratio must be in [0, 1]; got ", ratio));
  }
  const size_t n = d.links.size();
  std::vector<double> shares = worker_shares;
  if (shares.empty()) shares.assign(n, 1.0);
  if (shares.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", shares.size(), " worker shares for ", n, " workers"));
  }
  double sum = 0;
  for (double s : shares) {
    if (!(s >= 0)) return absl::InvalidArgumentError("worker shares must be >= 0");
    sum += s;
  }
  if (sum <= 0) shares.assign(n, 1.0), sum = static_cast<double>(n);
  std::vector<double> consumer_shares = {1.0 - ratio};
  for (size_t i = 0; i < n; ++i) consumer_shares.push_back(ratio * shares[i] / sum);
  SLUICE_RETURN_IF_ERROR(d.coordinator->SetShares(consumer_shares));
  for (size_t i = 0; i < n; ++i) d.links[i]->set_share(consumer_shares[i + 1]);
  std::lock_guard<std::mutex> lock(d.plan_mu);
  d.ratio_now = ratio;
  return absl::OkStatus();
}

Status Loader::SetLocalSpillOver(bool spill_over) {
  Impl& d = *impl_;
  if (d.local || d.coordinator == nullptr) {
    return absl::FailedPreconditionError(
        "this Loader runs the local pipeline; offloading needs a new Loader");
  }
  d.coordinator->SetSpillOver(0, spill_over);  // consumer 0 is the local side
  std::lock_guard<std::mutex> lock(d.plan_mu);
  d.local_spill_over_now = spill_over;
  return absl::OkStatus();
}

const Schema& Loader::output_schema() const {
  return impl_->root->schema();
}

int64_t Loader::samples_per_epoch() const {
  return impl_->per_epoch;
}

std::shared_ptr<const pipeline::SourceFiles> Loader::source_files() const {
  return impl_->files;
}

LoaderReport Loader::Report() const {
  const Impl& d = *impl_;
  LoaderReport r;
  r.cut = d.options.cut;
  {
    std::lock_guard<std::mutex> lock(d.plan_mu);
    r.ratio = d.ratio_now;
    r.local_spill_over = d.local_spill_over_now;
  }
  r.read_mode = d.options.read_mode;
  r.codec = d.options.codec;
  r.threads = d.threads;
  {
    std::lock_guard<std::mutex> lock(d.warn_mu);
    r.warnings = d.warnings;
  }
  r.shuffle_buffer_peak_samples = d.stats->shuffle_buffer_peak_samples.load();
  r.shuffle_buffer_peak_bytes = d.stats->shuffle_buffer_peak_bytes.load();
  r.batches_in_place = d.stats->batches_in_place.load();
  if (d.local) {
    const pipeline::PipelineStats& stats = *d.stats;
    r.offloaded = false;
    r.ratio = 0;
    r.local_spill_over = true;
    r.samples_out = stats.samples_out.load();
    r.batches_out = stats.batches_out.load();
    r.samples_local = stats.source_samples.load() - stats.skipped();
    r.skipped = stats.skipped();
    r.local_ops = stats.SnapshotOps();
    return r;
  }
  r.offloaded = true;
  const MergeStats merge = d.merge->Stats();
  const CoordinatorStats coord = d.coordinator->Stats();
  r.samples_local = merge.samples_by_place[0];
  for (size_t i = 0; i < d.links.size(); ++i) {
    r.workers.push_back(d.links[i]->Report(merge.samples_by_place[i + 1]));
  }
  r.duplicates_dropped = merge.duplicates_dropped;
  r.requeued_samples = coord.requeued_samples;
  r.skipped = d.stats->skipped();
  r.samples_out = d.samples_out.load();
  r.batches_out = d.batches_out.load();
  r.local_ops = d.stats->SnapshotOps();
  return r;
}

pipeline::SourceProgress Loader::Progress() const { return impl_->progress.Get(); }

namespace {

void AddWorker(std::vector<WorkerReport>& sum, const WorkerReport& w) {
  for (WorkerReport& s : sum) {
    if (s.address != w.address) continue;
    s.share = w.share;
    s.samples += w.samples;
    s.bytes_received += w.bytes_received;
    s.read_cpu_ns += w.read_cpu_ns;
    s.decode_cpu_ns += w.decode_cpu_ns;
    s.connected = w.connected;
    s.connects += w.connects;
    s.failures += w.failures;
    s.drains += w.drains;
    s.draining = w.draining;
    s.hangs += w.hangs;
    if (w.hangs > 0) s.last_hang_silence_s = w.last_hang_silence_s;
    if (!w.last_error.empty()) s.last_error = w.last_error;
    if (!w.metrics.empty()) {
      s.metrics = w.metrics;
      s.cpu_ns = w.cpu_ns;  // read with those metrics
    }
    if (w.cpu_share > 0) s.cpu_share = w.cpu_share;
    return;
  }
  sum.push_back(w);
}

}  // namespace

void AddLoaderReport(LoaderReport& sum, const LoaderReport& r) {
  sum.offloaded = r.offloaded;
  sum.cut = r.cut;
  sum.ratio = r.ratio;
  sum.local_spill_over = r.local_spill_over;
  sum.read_mode = r.read_mode;
  sum.codec = r.codec;
  sum.threads = r.threads;
  sum.samples_local += r.samples_local;
  for (const WorkerReport& w : r.workers) AddWorker(sum.workers, w);
  sum.duplicates_dropped += r.duplicates_dropped;
  sum.requeued_samples += r.requeued_samples;
  sum.skipped += r.skipped;
  sum.samples_out += r.samples_out;
  sum.batches_out += r.batches_out;
  sum.batches_in_place += r.batches_in_place;
  sum.local_ops = r.local_ops;
  sum.shuffle_buffer_peak_samples =
      std::max(sum.shuffle_buffer_peak_samples, r.shuffle_buffer_peak_samples);
  sum.shuffle_buffer_peak_bytes = std::max(sum.shuffle_buffer_peak_bytes, r.shuffle_buffer_peak_bytes);
  for (const std::string& w : r.warnings) {
    if (sum.warnings.size() < 100) sum.warnings.push_back(w);
  }
}

}  // namespace sluice::runtime
