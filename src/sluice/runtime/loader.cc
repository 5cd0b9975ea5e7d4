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

constexpr uint64_t kDefaultSplitSize = 32;
constexpr size_t kMaxWarnings = 100;
constexpr double kReconnectTimeoutS = 1.0;
// How often a reader waiting for its worker checks the worker's silence against its
// deadline: a hang is found within a quarter of a second of its deadline (the deadline is at
// least 10 s), for four wake-ups a second of a thread that is waiting anyway.
constexpr int64_t kLivenessCheckMs = 250;

// Which samples the consumer has received (or will never receive: skipped, dropped), by
// epoch, for Loader::Progress(). An epoch is folded into first_epoch once this process's
// share of it is received (the whole epoch unless the run is sharded by rank); a rank keeps
// the bits of the last epoch it folded as `finished`, which a merge of the ranks' progress
// needs (pipeline::MergeRankProgress). Thread-safe.
class ProgressTracker {
 public:
  void Init(uint64_t per_epoch, int64_t epochs, const pipeline::Shard& shard,
            pipeline::EvenRule even, const pipeline::SourceProgress* resume) {
    std::lock_guard<std::mutex> lock(mu_);
    n_ = per_epoch;
    epochs_ = epochs;
    shard_ = shard;
    even_ = even;
    if (resume == nullptr) return;
    first_epoch_ = resume->first_epoch;
    if (shard_.sharded()) finished_ = resume->finished;
    // The samples consumed before the division are known but not this process's to count.
    for (const auto& [epoch, bits] : resume->divided) {
      if (epoch < first_epoch_) continue;
      EpochBits& e = EntryLocked(epoch);
      uint64_t remaining = n_;
      for (uint64_t i = 0; i < bits.size() && i < n_; ++i) {
        if (!bits[i]) continue;
        e.bits[i] = true;
        --remaining;
      }
      e.divided = e.bits;
      e.expected = pipeline::SamplesPerRank(remaining, shard_, even_);
    }
    for (const auto& [epoch, bits] : resume->consumed) {
      if (epoch < first_epoch_) continue;
      for (uint64_t i = 0; i < bits.size() && i < n_; ++i) {
        if (bits[i]) MarkLocked(SampleId{epoch, i});
      }
    }
    for (const SampleId& id : resume->padded) MarkLocked(id);
    FoldLocked();
  }

  void Mark(SampleId id) {
    std::lock_guard<std::mutex> lock(mu_);
    MarkLocked(id);
    FoldLocked();
  }

  // The end of the stream: every epoch of the run is done.
  void Finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (epochs_ < 0) return;
    if (shard_.sharded() && !partial_.empty()) {
      finished_ = {{partial_.rbegin()->first, partial_.rbegin()->second.bits}};
    }
    first_epoch_ = std::max<uint32_t>(first_epoch_, static_cast<uint32_t>(epochs_));
    partial_.clear();
  }

  pipeline::SourceProgress Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    pipeline::SourceProgress p;
    p.first_epoch = first_epoch_;
    for (const auto& [epoch, e] : partial_) {
      p.consumed[epoch] = e.bits;
      if (!e.divided.empty()) p.divided[epoch] = e.divided;
      for (uint64_t index : e.pads) p.padded.insert(SampleId{epoch, index});
    }
    p.finished = finished_;
    return p;
  }

 private:
  struct EpochBits {
    std::vector<bool> bits;     // over the samples of the epoch
    std::vector<bool> divided;  // consumed before the epoch was divided (empty: none)
    std::set<uint64_t> pads;    // padded samples received (index >= n)
    uint64_t count = 0;         // samples of this process's share received
    uint64_t expected = 0;      // the size of that share
  };

  EpochBits& EntryLocked(uint32_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto [it, added] = partial_.try_emplace(epoch);
    if (added) {
      it->second.bits.assign(n_, false);
      it->second.expected = pipeline::SamplesPerRank(n_, shard_, even_);
    }
    return it->second;
  }

  void MarkLocked(SampleId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (id.epoch < first_epoch_) return;
    EpochBits& e = EntryLocked(id.epoch);
    if (id.index < n_) {
      if (e.bits[id.index]) return;
      e.bits[id.index] = true;
    } else if (!e.pads.insert(id.index).second) {
      return;
    }
    ++e.count;
  }

  void FoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = partial_.find(first_epoch_);
         it != partial_.end() && it->second.count >= it->second.expected;
         it = partial_.find(first_epoch_)) {
      if (shard_.sharded()) finished_ = {{first_epoch_, std::move(it->second.bits)}};
      partial_.erase(it);
      ++first_epoch_;
    }
  }

  mutable std::mutex mu_;
  uint64_t n_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t epochs_ ABSL_GUARDED_BY(mu_) = 1;
  pipeline::Shard shard_ ABSL_GUARDED_BY(mu_);
  pipeline::EvenRule even_ ABSL_GUARDED_BY(mu_) = pipeline::EvenRule::kDrop;
  uint32_t first_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint32_t, EpochBits> partial_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::vector<bool>> finished_ ABSL_GUARDED_BY(mu_);
};

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

// Local side of cut = after batch: collects the processed samples of each local split and
// stacks them, in split order, into batches of the batch size (a short last batch of the
// split is kept, or dropped and reported as skipped under drop_remainder), exactly as a
// worker batches a split. Thread-safe.
class SplitBatcher {
 public:
  SplitBatcher(Merge* merge, std::function<void(SampleId)> skip, Schema input,
               pipeline::BatchOptions options)
      : merge_(merge),
        skip_(std::move(skip)),
        input_(std::move(input)),
        options_(std::move(options)) {}

  void Begin(const SplitAssignment& split) {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = splits_[split.split_id];
    p.results.resize(split.samples.size());
    p.finished.assign(split.samples.size(), false);
    for (size_t i = 0; i < split.samples.size(); ++i) {
      where_[split.samples[i]] = {split.split_id, i};
    }
  }
  void Add(Element element) {
    const SampleId id = element.id;
    Resolve(id, std::move(element));
  }
  void Skip(SampleId id) { Resolve(id, std::nullopt); }

 private:
  struct Pending {
    std::vector<std::optional<Element>> results;
    std::vector<bool> finished;
    size_t next = 0;
    size_t resolved = 0;
    std::vector<Element> group;
  };

  void Resolve(SampleId id, std::optional<Element> element) {
    std::vector<std::vector<Element>> batches;
    std::vector<SampleId> dropped;
    const bool skipped = !element.has_value();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto w = where_.find(id);
      if (w == where_.end()) return;
      const auto [split_id, position] = w->second;
      where_.erase(w);
      Pending& p = splits_.at(split_id);
      p.results[position] = std::move(element);
      p.finished[position] = true;
      ++p.resolved;
      const size_t size = static_cast<size_t>(options_.size);
      while (p.next < p.results.size() && p.finished[p.next]) {
        std::optional<Element>& r = p.results[p.next++];
        if (!r.has_value()) continue;
        p.group.push_back(std::move(*r));
        r.reset();
        if (p.group.size() == size) batches.push_back(std::move(p.group)), p.group.clear();
      }
      if (p.resolved == p.results.size()) {
        if (!p.group.empty()) {
          if (options_.drop_remainder) {
            for (const Element& e : p.group) dropped.push_back(e.id);
          } else {
            batches.push_back(std::move(p.group));
          }
        }
        splits_.erase(split_id);
      }
    }
    if (skipped) skip_(id);
    for (const SampleId& d : dropped) skip_(d);
    for (std::vector<Element>& members : batches) {
      StatusOr<Element> batch = pipeline::StackBatch(std::move(members), input_, options_);
      if (!batch.ok()) {
        merge_->Fail(batch.status());
        return;
      }
      if (!merge_->Push(0, *std::move(batch)).ok()) return;
    }
  }

  Merge* const merge_;
  const std::function<void(SampleId)> skip_;
  const Schema input_;
  const pipeline::BatchOptions options_;
  std::mutex mu_;
  std::map<uint64_t, Pending> splits_ ABSL_GUARDED_BY(mu_);
  std::map<SampleId, std::pair<uint64_t, size_t>> where_ ABSL_GUARDED_BY(mu_);
};

// The local consumer's source: the samples of the splits the coordinator gives consumer 0,
// as source elements. Cancel() cancels the coordinator (the whole run).
class SplitSource : public pipeline::Iterator {
 public:
  SplitSource(Coordinator* coordinator, std::shared_ptr<const pipeline::SourceFiles> files,
              bool with_label, SplitBatcher* batcher)
      : coordinator_(coordinator),
        files_(std::move(files)),
        with_label_(with_label),
        batcher_(batcher),
        schema_(pipeline::SourceSchema(
            with_label ? pipeline::LabelMode::kParentDir : pipeline::LabelMode::kNone,
            !files_->spans.empty())) {}

  Status GetNext(Element* out, bool* end_of_stream) override {
    if (cancelled_.load()) return absl::CancelledError("pipeline cancelled");
    while (position_ >= split_.samples.size()) {
      position_ = 0;
      switch (coordinator_->Acquire(0, &split_)) {
        case Coordinator::Acquired::kSplit:
          if (batcher_ != nullptr) batcher_->Begin(split_);
          break;
        case Coordinator::Acquired::kDone:
          split_.samples.clear();
          *end_of_stream = true;
          return absl::OkStatus();
        default:
          split_.samples.clear();
          return absl::CancelledError("pipeline cancelled");
      }
    }
    const SampleId id = split_.samples[position_];
    *out = pipeline::MakeSourceElement(*files_, with_label_, id, split_.files[position_]);
    ++position_;
    *end_of_stream = false;
    return absl::OkStatus();
  }
  void Cancel() override {
    cancelled_.store(true);
    coordinator_->Cancel();
  }
  const Schema& schema() const override { return schema_; }

 private:
  Coordinator* const coordinator_;
  const std::shared_ptr<const pipeline::SourceFiles> files_;
  const bool with_label_;
  SplitBatcher* const batcher_;
  const Schema schema_;
  SplitAssignment split_;
  size_t position_ = 0;
  std::atomic<bool> cancelled_{false};
};

// A sample failure that on_error: fail makes fatal, as opposed to a broken stream.
// A message over the size limit fails again on every retry and on every worker: it ends the
// run with its message instead of re-queueing the same samples forever.
bool IsMessageLimitError(const Status& status) {
  return KindOf(status) == ErrorKind::kMessageLimit;
}

bool IsDataError(const Status& status, pipeline::OnError on_error) {
  if (IsMessageLimitError(status)) return true;
  if (on_error != pipeline::OnError::kFail) return false;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnauthenticated:
      return false;
    default:
      return KindOf(status) == ErrorKind::kData;
  }
}

Schema SchemaAfter(const pipeline::BuiltOps& built, int end) {
  return end == 0 ? built.input_schema : built.ops[end - 1]->output_schema();
}

pipeline::BatchOptions BatchOptionsOf(const pipeline::BatchSpec& b) {
  pipeline::BatchOptions o;
  o.size = b.size;
  o.drop_remainder = b.drop_remainder;
  o.padded = b.padded;
  o.padding_value = b.padding_value;
  o.padding_values = b.padding_values;
  return o;
}

class RemoteLink;

}  // namespace

struct Loader::Impl {
  ~Impl();
  void Warn(const std::string& message);
  void CancelAll();
  // A sample that will never reach the consumer (on_error: skip, drop_remainder).
  void SkipSample(SampleId id) {
    progress.Mark(id);
    if (merge != nullptr) merge->Skip(id);
  }

  pipeline::PipelineSpec spec;
  LoaderOptions options;
  int threads = 1;
  bool after_batch = false;
  int prefix_end = 0;  // ops [0, prefix_end) run where the sample is assigned

  ProgressTracker progress;

  // Local only: the whole pipeline in this process, as pipeline::LocalExecutor runs it.
  bool local = false;
  std::vector<std::unique_ptr<ops::Op>> local_ops;  // outlives `root`, whose map uses them

  // Offloaded.
  std::shared_ptr<const pipeline::SourceFiles> files;
  bool with_label = false;
  int64_t per_epoch = 0;
  pipeline::BuiltOps built;
  std::unique_ptr<pipeline::PipelineStats> stats;
  std::vector<std::unique_ptr<ops::Op>> wrappers;  // ReportingOps over built.ops
  std::vector<pipeline::MapStage> read_stage;      // ops[0], for local_read feeding
  rpc::SessionConfig session;
  std::unique_ptr<Coordinator> coordinator;
  std::shared_ptr<Merge> merge;
  std::unique_ptr<SplitBatcher> batcher;
  std::unique_ptr<pipeline::Iterator> prefix;
  std::thread pump;
  std::vector<std::unique_ptr<RemoteLink>> links;
  std::unique_ptr<pipeline::Iterator> root;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> samples_out{0};
  std::atomic<int64_t> batches_out{0};

  mutable std::mutex warn_mu;
  std::vector<std::string> warnings ABSL_GUARDED_BY(warn_mu);

  mutable std::mutex plan_mu;
  double ratio_now ABSL_GUARDED_BY(plan_mu) = 0;  // options.ratio, then SetShares'
  // options.local_spill_over, then SetLocalSpillOver's.
  bool local_spill_over_now ABSL_GUARDED_BY(plan_mu) = true;
};

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

namespace {

// One worker: a supervisor thread keeps a RemoteStream open (reconnecting with backoff), a
// feeder thread sends it the splits the coordinator gives its consumer, and the supervisor
// reads its events into the merge.
class RemoteLink {
 public:
  RemoteLink(Loader::Impl* loader, int consumer, rpc::ConnectOptions connect, double share)
      : loader_(loader),
        consumer_(consumer),
        connect_(std::move(connect)),
        share_(share),
        watch_(loader->options.hang) {}

  void set_share(double share) {
    std::lock_guard<std::mutex> lock(mu_);
    share_ = share;
  }

  ~RemoteLink() { Stop(); }

  // The first connection attempt (in Create, before the coordinator exists).
  Status OpenFirst() {
    StatusOr<std::unique_ptr<rpc::RemoteStream>> opened =
        rpc::RemoteStream::Open(connect_, loader_->session);
    std::lock_guard<std::mutex> lock(mu_);
    if (!opened.ok()) {
      last_error_ = std::string(opened.status().message());
      return opened.status();
    }
    stream_ = std::shared_ptr<rpc::RemoteStream>(std::move(*opened));
    ++connects_;
    connected_ = true;
    return absl::OkStatus();
  }

  void Start() {
    supervisor_ = std::thread([this] { Supervise(); });
    pthread_setname_np(supervisor_.native_handle(), "sluice-link");
  }

  // Cancels the stream and wakes a backoff sleep; the supervisor then exits.
  void Cancel() {
    std::shared_ptr<rpc::RemoteStream> stream;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      stream = stream_;
      cv_.notify_all();
    }
    if (stream != nullptr) stream->Cancel();
  }

  void Stop() {
    Cancel();
    if (supervisor_.joinable()) supervisor_.join();
  }

  WorkerReport Report(int64_t samples) const {
    std::lock_guard<std::mutex> lock(mu_);
    WorkerReport r;
    r.address = connect_.address;
    r.share = share_;
    r.samples = samples;
    r.bytes_received = bytes_received_;
    r.read_cpu_ns = past_read_cpu_ns_ + (stream_ ? stream_->read_cpu_ns() : 0);
    r.decode_cpu_ns = past_decode_cpu_ns_ + (stream_ ? stream_->decode_cpu_ns() : 0);
    r.connected = connected_;
    r.connects = connects_;
    r.failures = failures_;
    r.drains = drains_;
    r.draining = draining_;
    r.hangs = hangs_;
    r.last_hang_silence_s = last_hang_silence_s_;
    r.last_error = last_error_;
    r.metrics = metrics_;
    r.cpu_share = cpu_share_;
    return r;
  }

 private:
  bool Stopping() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_ || loader_->stopping.load();
  }

  // Sleeps `seconds` unless stopped first; returns false when stopped.
  bool Backoff(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                 [&] { return stop_ || loader_->stopping.load(); });
    return !stop_ && !loader_->stopping.load();
  }

  void Supervise() {
    Coordinator* coordinator = loader_->coordinator.get();
    double backoff = loader_->options.reconnect_initial_s;
    std::string last_warning;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Unreachable at start: Create() already said so; wait before trying again.
      if (stream_ == nullptr) last_warning = last_error_;
    }
    if (!last_warning.empty()) {
      if (!Backoff(backoff)) return;
      backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
    }
    for (;;) {
      if (Stopping() || coordinator->done()) break;
      std::shared_ptr<rpc::RemoteStream> stream;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stream = stream_;
      }
      if (stream == nullptr) {
        // Short attempts: the backoff loop is the retry, and Stop() waits for an attempt.
        rpc::ConnectOptions attempt = connect_;
        attempt.connect_timeout_s = std::min(attempt.connect_timeout_s, kReconnectTimeoutS);
        StatusOr<std::unique_ptr<rpc::RemoteStream>> opened =
            rpc::RemoteStream::Open(attempt, loader_->session);
        if (!opened.ok()) {
          const std::string message(opened.status().message());
          {
            std::lock_guard<std::mutex> lock(mu_);
            last_error_ = message;
          }
          if (message != last_warning) {
            loader_->Warn(absl::StrCat("cannot reach worker ", connect_.address,
                                       " (retrying in the background): ", message));
            last_warning = message;
          }
          if (!Backoff(backoff)) break;
          backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
          continue;
        }
        stream = std::shared_ptr<rpc::RemoteStream>(std::move(*opened));
        int64_t connects = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          stream_ = stream;
          connects = ++connects_;
          connected_ = true;
          if (stop_) stream->Cancel();
        }
        if (connects > 1 || !last_warning.empty()) {
          loader_->Warn(absl::StrCat("worker ", connect_.address, " is back; using it again"));
        }
        last_warning.clear();
      }
      backoff = loader_->options.reconnect_initial_s;
      coordinator->SetActive(consumer_, true);

      std::thread feeder([this, stream] { Feed(*stream); });
      pthread_setname_np(feeder.native_handle(), "sluice-feed");
      const StreamEnd end = Read(*stream);
      const Status& failure = end.status;
      const int64_t requeued = coordinator->ConsumerFailed(consumer_);
      stream->Cancel();
      feeder.join();
      {
        std::lock_guard<std::mutex> lock(mu_);
        past_read_cpu_ns_ += stream->read_cpu_ns();
        past_decode_cpu_ns_ += stream->decode_cpu_ns();
        stream_.reset();
        connected_ = false;
        draining_ = false;
        // The worker left on purpose, whether or not the run still needs it: a drain, not a
        // failure.
        if (end.drained) ++drains_;
      }
      const int64_t drained_requeued = requeued + end.returned_samples;
      if (end.drained) {
        Notify(WorkerEvent::Kind::kDrained, drained_requeued, 0, std::string(failure.message()));
      }
      if (Stopping() || coordinator->done() || !loader_->merge->failure().ok()) break;
      if (IsDataError(failure, loader_->spec.options.on_error)) {
        loader_->merge->Fail(failure);
        break;
      }
      last_warning = std::string(failure.message());
      if (end.drained) {
        // What it did not deliver is re-queued like a failed worker's, and it is reconnected
        // alike (a worker restarted on the same address is used again).
        loader_->Warn(absl::StrCat("worker ", connect_.address, " drained (", drained_requeued,
                                   " samples it had not delivered re-queued; reconnecting in "
                                   "the background)"));
        if (!Backoff(backoff)) break;
        backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++failures_;
        last_error_ = std::string(failure.message());
        if (end.hung.has_value()) {
          ++hangs_;
          last_hang_silence_s_ = end.hung->silence_s;
        }
      }
      if (end.hung.has_value()) {
        loader_->Warn(absl::StrCat(failure.message(), "; ", requeued,
                                   " samples re-queued; its stream is cancelled and it is "
                                   "reconnected when it answers again"));
        Notify(WorkerEvent::Kind::kHung, requeued, 0, std::string(failure.message()));
      } else {
        loader_->Warn(absl::StrCat("worker ", connect_.address, " failed (", requeued,
                                   " samples re-queued; reconnecting): ", failure.message()));
        Notify(WorkerEvent::Kind::kFailed, requeued, 0, std::string(failure.message()));
      }
      if (!Backoff(backoff)) break;
      backoff = std::min(backoff * 2, loader_->options.reconnect_max_s);
    }
    std::lock_guard<std::mutex> lock(mu_);
    connected_ = false;
  }

  void Feed(rpc::RemoteStream& stream) {
    Coordinator* coordinator = loader_->coordinator.get();
    const bool local_read = loader_->session.read_mode == ReadMode::kLocalRead;
    for (;;) {
      SplitAssignment split;
      const Coordinator::Acquired got = coordinator->Acquire(consumer_, &split);
      if (got != Coordinator::Acquired::kSplit) {
        // Done or cancelled: end the stream so that the reader returns. Inactive: the reader
        // failed and is cleaning up.
        if (got != Coordinator::Acquired::kInactive) stream.Cancel();
        return;
      }
      rpc::Split out;
      out.split_id = split.split_id;
      out.elements.reserve(split.samples.size());
      for (size_t i = 0; i < split.samples.size(); ++i) {
        const SampleId id = split.samples[i];
        Element e =
            pipeline::MakeSourceElement(*loader_->files, loader_->with_label, id, split.files[i]);
        if (local_read) {
          Status read = pipeline::ApplyStages(loader_->read_stage, e);
          if (!read.ok()) {
            if (loader_->spec.options.on_error == pipeline::OnError::kSkip) {
              loader_->stats->RecordSkip(std::string(read.message()));
              loader_->SkipSample(id);
              continue;
            }
            loader_->merge->Fail(read);
            stream.Cancel();
            return;
          }
        }
        out.elements.push_back(std::move(e));
      }
      if (out.elements.empty()) continue;
      // A dead stream fails the send; the reader sees the failure and re-queues the split.
      // A split too large for the worker can never be sent: that ends the run, named.
      if (Status sent = stream.SendSplit(std::move(out)); !sent.ok()) {
        if (IsMessageLimitError(sent)) loader_->merge->Fail(sent);
        return;
      }
    }
  }

  // How a stream ended (Read).
  struct StreamEnd {
    Status status;                    // why
    std::optional<HangVerdict> hung;  // set: the worker was hung and the stream cancelled
    bool drained = false;             // the worker said it drains before the end
    int64_t returned_samples = 0;     // re-queued from the splits the worker returned
  };

  void Notify(WorkerEvent::Kind kind, int64_t requeued, double deadline_s, std::string message) {
    if (!loader_->options.on_worker_event) return;
    WorkerEvent e;
    e.kind = kind;
    e.address = connect_.address;
    e.requeued_samples = requeued;
    e.deadline_s = deadline_s;
    e.message = std::move(message);
    loader_->options.on_worker_event(e);
  }

  // Reads events until the stream fails (or is cancelled, or the worker drained) or the
  // worker is found hung (the stream is then cancelled); returns how it ended.
  StreamEnd Read(rpc::RemoteStream& stream) {
    Merge* merge = loader_->merge.get();
    Coordinator* coordinator = loader_->coordinator.get();
    StreamEnd end;
    watch_.Restart(NowNanos());
    for (;;) {
      // Only when nothing is waiting to be read is the worker silent: events queued while
      // this thread was pushing into the merge are deliveries.
      std::optional<rpc::StreamEvent> next = stream.NextFor(0);
      while (!next.has_value()) {
        if (std::optional<HangVerdict> v =
                watch_.Check(coordinator->HeldSamples(consumer_), NowNanos())) {
          stream.Cancel();
          end.hung = v;
          end.status = absl::DeadlineExceededError(
              absl::StrCat("worker ", connect_.address, " hung: ", v->Describe(watch_.policy())));
          return end;
        }
        next = stream.NextFor(kLivenessCheckMs);
      }
      rpc::StreamEvent& event = *next;
      switch (event.kind) {
        case rpc::StreamEvent::Kind::kElements: {
          {
            std::lock_guard<std::mutex> lock(mu_);
            bytes_received_ += static_cast<int64_t>(event.wire_bytes);
          }
          int64_t samples = 0;
          for (const Element& e : event.elements) {
            samples += e.members.empty() ? 1 : static_cast<int64_t>(e.members.size());
          }
          watch_.Delivered(samples, NowNanos());
          for (Element& e : event.elements) {
            if (!merge->Push(consumer_, std::move(e)).ok()) {
              stream.Cancel();
              end.status = absl::CancelledError("merge closed");
              return end;
            }
          }
          break;
        }
        case rpc::StreamEvent::Kind::kSplitDone:
          watch_.Delivered(0, NowNanos());
          for (const rpc::SkippedSample& skipped : event.skipped) {
            // A short last batch dropped under drop_remainder is not a failed sample.
            if (skipped.kind != ErrorKind::kDropped) {
              loader_->stats->RecordSkip(
                  absl::StrCat("worker ", connect_.address, ": ", skipped.reason));
            }
            loader_->SkipSample(skipped.id);
          }
          coordinator->ReleaseSplit(event.split_id);
          break;
        case rpc::StreamEvent::Kind::kMetrics: {
          std::lock_guard<std::mutex> lock(mu_);
          metrics_ = std::move(event.metrics);
          if (event.cpu_share > 0) cpu_share_ = event.cpu_share;
          break;
        }
        case rpc::StreamEvent::Kind::kDraining:
          if (!end.drained) {
            end.drained = true;
            // No new splits: the feeder's Acquire returns kInactive and it stops, while the
            // splits the worker holds stay open until delivered or returned.
            coordinator->SetActive(consumer_, false);
            {
              std::lock_guard<std::mutex> lock(mu_);
              draining_ = true;
            }
            loader_->Warn(absl::StrFormat(
                "worker %s is draining (shutting down within %.1f s): it gets no new splits, "
                "and its share goes to the others",
                connect_.address, event.deadline_s));
            Notify(WorkerEvent::Kind::kDraining, 0, event.deadline_s, "");
          }
          break;
        case rpc::StreamEvent::Kind::kSplitReturned:
          watch_.Delivered(0, NowNanos());
          end.returned_samples += coordinator->ReleaseSplit(event.split_id);
          break;
        case rpc::StreamEvent::Kind::kFailed:
          end.status = event.status.ok() ? absl::UnavailableError("stream ended") : event.status;
          return end;
      }
    }
  }

  Loader::Impl* const loader_;
  const int consumer_;
  const rpc::ConnectOptions connect_;
  double share_ ABSL_GUARDED_BY(mu_);
  std::thread supervisor_;
  DeliveryWatch watch_;  // used by the supervisor thread only (Read)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<rpc::RemoteStream> stream_ ABSL_GUARDED_BY(mu_);
  // Receive-side CPU of the streams that ended (RemoteStream::read_cpu_ns/decode_cpu_ns).
  int64_t past_read_cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t past_decode_cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  int64_t connects_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t drains_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t hangs_ ABSL_GUARDED_BY(mu_) = 0;
  double last_hang_silence_s_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_received_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::vector<rpc::WorkerOpMetrics> metrics_ ABSL_GUARDED_BY(mu_);
  double cpu_share_ ABSL_GUARDED_BY(mu_) = 0;
};

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

  const size_t budget = opt.max_buffered_bytes;
  if (!built.ops.empty()) {
    pipeline::MapOptions mo;
    mo.threads = d.threads;
    mo.deterministic = spec.options.deterministic;
    mo.on_error = spec.options.on_error;
    mo.max_buffered_bytes = budget / 4;
    mo.max_in_flight =
        static_cast<size_t>(std::max(2 * d.threads, spec.batch.size > 0 ? 16 : 0));
    mo.stats = d.stats.get();
    ProgressTracker* progress = &d.progress;
    mo.on_skip = [progress](const Element& e, const Status&) { progress->Mark(e.id); };
    std::vector<pipeline::MapStage> stages = pipeline::MakeStages(built, d.stats.get());
    it = pipeline::ParallelMapIterator::Create(std::move(it), std::move(stages),
                                               built.output_schema, mo);
  }
  if (spec.shuffle_buffer > 0) {
    it = std::make_unique<pipeline::ShuffleBufferIterator>(
        std::move(it), static_cast<size_t>(spec.shuffle_buffer), spec.source.seed, budget / 4,
        d.stats.get());
  }
  if (spec.batch.size > 0) {
    SLUICE_ASSIGN_OR_RETURN(it,
                            pipeline::BatchIterator::Create(std::move(it), BatchOptionsOf(spec.batch)));
  }
  if (spec.prefetch > 0) {
    it = pipeline::PrefetchIterator::Create(std::move(it), static_cast<size_t>(spec.prefetch),
                                            budget / 2);
  }
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
  const pipeline::BatchOptions batch_options = BatchOptionsOf(spec.batch);
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
    d.batcher = std::make_unique<SplitBatcher>(
        d.merge.get(), [loader](SampleId id) { loader->SkipSample(id); },
        SchemaAfter(d.built, d.prefix_end), batch_options);
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
    pipeline::MapOptions mo_prefix;
    mo_prefix.threads = d.threads;
    mo_prefix.on_error = spec.options.on_error;
    mo_prefix.max_buffered_bytes = opt.max_buffered_bytes / 4;
    mo_prefix.stats = d.stats.get();
    prefix = pipeline::ParallelMapIterator::Create(std::move(prefix), std::move(stages),
                                                   SchemaAfter(d.built, d.prefix_end), mo_prefix);
  }
  d.prefix = std::move(prefix);

  // The suffix.
  std::unique_ptr<pipeline::Iterator> it = std::make_unique<MergeReader>(d.merge);
  if (d.prefix_end < num_ops) {
    pipeline::MapOptions mo_suffix;
    mo_suffix.threads = d.threads;
    mo_suffix.deterministic = spec.options.deterministic;
    mo_suffix.on_error = spec.options.on_error;
    mo_suffix.max_buffered_bytes = opt.max_buffered_bytes / 4;
    mo_suffix.stats = d.stats.get();
    ProgressTracker* progress = &d.progress;  // already in the merge: only the tracker
    mo_suffix.on_skip = [progress](const Element& e, const Status&) { progress->Mark(e.id); };
    it = pipeline::ParallelMapIterator::Create(
        std::move(it), pipeline::MakeStages(d.built, d.stats.get(), d.prefix_end, num_ops),
        d.built.output_schema, mo_suffix);
  }
  if (!d.after_batch) {
    if (spec.shuffle_buffer > 0) {
      it = std::make_unique<pipeline::ShuffleBufferIterator>(
          std::move(it), static_cast<size_t>(spec.shuffle_buffer), spec.source.seed,
          opt.max_buffered_bytes / 4, d.stats.get());
    }
    if (spec.batch.size > 0) {
      SLUICE_ASSIGN_OR_RETURN(it, pipeline::BatchIterator::Create(std::move(it), batch_options));
    }
  }
  if (spec.prefetch > 0) {
    it = pipeline::PrefetchIterator::Create(std::move(it), static_cast<size_t>(spec.prefetch),
                                            opt.max_buffered_bytes / 2);
  }
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
    if (!w.metrics.empty()) s.metrics = w.metrics;
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
  sum.local_ops = r.local_ops;
  sum.shuffle_buffer_peak_samples =
      std::max(sum.shuffle_buffer_peak_samples, r.shuffle_buffer_peak_samples);
  sum.shuffle_buffer_peak_bytes = std::max(sum.shuffle_buffer_peak_bytes, r.shuffle_buffer_peak_bytes);
  for (const std::string& w : r.warnings) {
    if (sum.warnings.size() < 100) sum.warnings.push_back(w);
  }
}

}  // namespace sluice::runtime
