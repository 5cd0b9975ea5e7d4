#include "sluice/rpc/worker_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sluice/core/clock.h"
#include "sluice/core/error_kind.h"
#include "sluice/core/cpu_budget.h"
#include "sluice/ops/storage.h"
#include "sluice/ops/url_storage.h"
#include "sluice/pipeline/segment.h"
#include "sluice/pipeline/source.h"
#include "sluice/rpc/fair_share.h"
#include "sluice/rpc/read_limiter.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif

namespace sluice::rpc {

// State shared by the service and its sessions; sessions may outlive the service's pool,
// so the pool is reached through here and is gone after Shutdown.
struct WorkerSession::Shared {
  std::mutex mu;
  ThreadPool* pool ABSL_GUARDED_BY(mu) = nullptr;
  int threads = 1;
  int max_sessions = 16;
  int open ABSL_GUARDED_BY(mu) = 0;
  bool shutdown ABSL_GUARDED_BY(mu) = false;
  bool draining ABSL_GUARDED_BY(mu) = false;
  std::vector<std::weak_ptr<WorkerSession>> sessions ABSL_GUARDED_BY(mu);
  std::unique_ptr<ReadLimiter> read_limiter;  // set once at construction; null: no limit
  // Set once at construction: every file or URL an op reads on this worker goes through
  // `storage` (URLs under --data-url; anything else through `files`).
  std::unique_ptr<ops::Storage> files;
  std::unique_ptr<ops::Storage> storage;
  size_t memory_budget = 0;                  // set once at construction
  size_t reserved ABSL_GUARDED_BY(mu) = 0;  // by the open sessions
  std::function<int64_t()> clock;             // set once at construction; null: NowNanos
  uint64_t next_id ABSL_GUARDED_BY(mu) = 0;
  int64_t expired ABSL_GUARDED_BY(mu) = 0;
  WorkerCounters counters;
  // What closed sessions ran, per op name (their counters end with them).
  std::vector<pipeline::OpStatsSnapshot> retired_ops ABSL_GUARDED_BY(mu);
  // The totals the last OpTotals returned (they only grow).
  std::vector<pipeline::OpStatsSnapshot> reported_ops ABSL_GUARDED_BY(mu);

  // Which open session a free thread serves (fair_share.h), and the sessions by id.
  FairShare fair ABSL_GUARDED_BY(mu){static_cast<int64_t>(kActivityWindowS * 1e9)};
  // The CPU of every session's tasks, charged as they end (WorkerSession::cpu_ns divides the
  // process's CPU between the sessions by it).
  int64_t task_cpu_ns ABSL_GUARDED_BY(mu) = 0;
  std::map<uint64_t, std::weak_ptr<WorkerSession>> by_id ABSL_GUARDED_BY(mu);
  // The CPUs the worker may use, read afresh: a container's quota can change while the
  // worker runs (and the trainers' planners re-plan when it does). Set once at construction.
  std::function<double()> cpu_budget;

  int64_t Now() const { return clock ? clock() : NowNanos(); }

  // Session `id` has one more sample to run: a pool task that serves whichever session is
  // owed the CPU when a thread is free (one task per sample waiting, so every sample waiting
  // is run). False once the pool is gone.
  static bool Enqueue(const std::shared_ptr<Shared>& shared, uint64_t id) {
    std::lock_guard<std::mutex> lock(shared->mu);
    if (shared->pool == nullptr) return false;
    shared->fair.Wait(id, shared->Now());
    shared->pool->Schedule([shared] { RunNext(*shared); });
    return true;
  }
  static void RunNext(Shared& shared) {
    std::shared_ptr<WorkerSession> session;
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      const std::optional<uint64_t> next = shared.fair.Next(shared.Now());
      if (!next.has_value()) return;  // its session closed: its samples are dropped
      auto it = shared.by_id.find(*next);
      if (it != shared.by_id.end()) session = it->second.lock();
    }
    if (session != nullptr) session->RunOne();  // which charges the session's CPU
  }
  // The session leaves the scheduler (its slot is given back).
  void Retire(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    fair.Remove(id, Now());
    by_id.erase(id);
  }
};

namespace {

// Room left in a message for the protobuf framing around a chunk's header and payload.
constexpr size_t kMessageOverhead = 4096;

// The payload that marks a DrainingRefusal.
constexpr absl::string_view kDrainingPayload = "sluice.rpc/draining";

size_t SamplesIn(const Element& e) { return e.members.empty() ? 1 : e.members.size(); }

// `sum` += `op`, matched by name (an op that appears twice in a spec is one series).
void AddOpTotals(std::vector<pipeline::OpStatsSnapshot>& sum, const pipeline::OpStatsSnapshot& op) {
  for (pipeline::OpStatsSnapshot& s : sum) {
    if (s.name != op.name) continue;
    s.samples += op.samples;
    s.cpu_ns += op.cpu_ns;
    s.bytes_out += op.bytes_out;
    s.errors += op.errors;
    return;
  }
  sum.push_back(op);
}

}  // namespace

const char* SluiceVersion() { return SLUICE_VERSION; }

Status DrainingRefusal(std::string_view message) {
  Status status = absl::UnavailableError(std::string(message));
  status.SetPayload(kDrainingPayload, absl::Cord("1"));
  return status;
}

bool IsDrainingRefusal(const Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(kDrainingPayload).has_value();
}

size_t DefaultMemoryBudget() {
  // The machine's memory, then the cgroup's limit when one is set (v2, then v1).
  size_t total = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  while (meminfo >> key) {
    if (key == "MemTotal:") {
      size_t kb = 0;
      meminfo >> kb;
      total = kb * 1024;
      break;
    }
    std::getline(meminfo, key);
  }
  for (const char* path : {"/sys/fs/cgroup/memory.max",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream limit(path);
    size_t bytes = 0;
    if (limit >> bytes && bytes > 0 && (total == 0 || bytes < total)) total = bytes;
  }
  if (total == 0) total = size_t{8} << 30;  // unknown: assume a small machine
  return total / 2;
}

// ---------------------------------------------------------------------------------------
// WorkerSession

WorkerSession::WorkerSession(std::shared_ptr<Shared> shared, SessionInfo info)
    : shared_(std::move(shared)), info_(std::move(info)), open_process_cpu_ns_(ProcessCpuNanos()) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  open_task_cpu_ns_ = shared_->task_cpu_ns;
}

int64_t WorkerSession::cpu_ns() const {
  const int64_t process = ProcessCpuNanos() - open_process_cpu_ns_;
  std::lock_guard<std::mutex> lock(shared_->mu);
  const int64_t all = shared_->task_cpu_ns - open_task_cpu_ns_;
  if (all <= 0 || own_task_cpu_ns_ <= 0) return 0;
  return static_cast<int64_t>(static_cast<double>(process) *
                              std::min(1.0, static_cast<double>(own_task_cpu_ns_) / all));
}

WorkerSession::~WorkerSession() { ReleaseSlot(); }

double WorkerSession::cpu_share() const {
  const double budget = shared_->cpu_budget();
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->fair.Share(info_.id, budget, shared_->Now());
}

void WorkerSession::ReleaseSlot() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slot_released_) return;
    slot_released_ = true;
  }
  const std::vector<WorkerOpMetrics> ran = stats_ ? Metrics() : std::vector<WorkerOpMetrics>{};
  std::lock_guard<std::mutex> lock(shared_->mu);
  --shared_->open;
  shared_->Retire(info_.id);
  shared_->reserved -= reservation_;
  for (const WorkerOpMetrics& m : ran) {
    AddOpTotals(shared_->retired_ops, {m.name, m.samples, m.cpu_ns, m.bytes_out, m.errors});
  }
  retired_ = true;
}

Status WorkerSession::AddEncodedSplit(uint64_t split_id, std::string_view header,
                                      std::string payload) {
  DecodeLimits limits;
  limits.max_raw_payload_bytes = max_input_bytes_;
  auto elements = DecodeElements(header, std::move(payload), limits);
  if (!elements.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("split ", split_id, ": ", elements.status().message()));
  }
  return AddSplit(split_id, *std::move(elements));
}

Status WorkerSession::AddSplit(uint64_t split_id, std::vector<Element> elements) {
  size_t bytes = 0;
  for (const Element& e : elements) {
    if (static_cast<int>(e.tensors.size()) != input_schema_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "split ", split_id, ": sample (", e.id.epoch, ", ", e.id.index, ") has ",
          e.tensors.size(), " fields, the session expects ", input_schema_.ToString()));
    }
    for (int i = 0; i < input_schema_.size(); ++i) {
      if (!input_schema_.Matches(i, e.tensors[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "split ", split_id, ": sample (", e.id.epoch, ", ", e.id.index, ") field '",
            input_schema_.field(i).name, "' is ", e.tensors[i].DebugString(), ", expected ",
            input_schema_.field(i).ToString()));
      }
    }
    bytes += e.nbytes();
  }
  std::lock_guard<std::mutex> lock(mu_);
  TouchLocked();
  if (cancelled_ || failed_) return absl::FailedPreconditionError("the session is over");
  if (draining_) {
    WorkerOutput out;
    out.kind = WorkerOutput::Kind::kSplitReturned;
    out.split_id = split_id;
    out.reason = "refused: the worker is draining (shutting down)";
    outputs_.push_back(std::move(out));
    ++returned_;
    cv_.notify_all();
    return DrainingRefusal(
        absl::StrCat("split ", split_id, " refused: the worker is draining (shutting down)"));
  }
  if (input_closed_) return absl::FailedPreconditionError("the session's input is closed");
  if (splits_.count(split_id) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("split ", split_id, " is already open"));
  }
  if (input_bytes_ + bytes > max_input_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "split ", split_id, ": queued input would reach ", input_bytes_ + bytes,
        " bytes, over the worker's per-session memory cap of ", max_input_bytes_, " bytes"));
  }
  SplitState& split = splits_[split_id];
  split.total = elements.size();
  if (batch_) {
    split.groups.emplace(elements.size(), static_cast<size_t>(batch_options_.size),
                         batch_options_.drop_remainder);
  }
  input_bytes_ += bytes;
  shared_->counters.splits_received.fetch_add(1, std::memory_order_relaxed);
  shared_->counters.bytes_received.fetch_add(static_cast<int64_t>(bytes),
                                             std::memory_order_relaxed);
  for (size_t i = 0; i < elements.size(); ++i) {
    const size_t b = elements[i].nbytes();
    work_.push_back(WorkItem{split_id, i, std::move(elements[i]), b});
  }
  if (split.total == 0) MaybeFinishSplitLocked(split_id);
  MaybeScheduleLocked();
  return absl::OkStatus();
}

void WorkerSession::TouchLocked() { last_heard_ns_ = std::max(last_heard_ns_, shared_->Now()); }

std::shared_ptr<SlotArenaWriter> WorkerSession::SlotWriter() const {
  std::lock_guard<std::mutex> lock(slot_writer_mu_);
  return slot_writer_;
}

size_t WorkerSession::WireEstimate(const Element& element, const SlotArenaWriter* writer) {
  size_t n = WireBytesUpperBound(element);
  if (writer == nullptr) return n;
  // A tensor in a shared slot crosses as its name: its bytes are neither sent nor buffered.
  for (const Tensor& t : element.tensors) {
    if (writer->OffsetOf(t).has_value()) n -= std::min(n, t.nbytes());
  }
  return n;
}

bool WorkerSession::AttachSharedSlots(std::shared_ptr<SlotArenaWriter> writer) {
  if (shared_slots_ == nullptr || writer == nullptr) return false;
  const SlotArenaLayout& layout = writer->layout();
  if (layout.slots != static_cast<uint64_t>(shared_slots_->batch_size()) ||
      layout.region_bytes() != shared_slots_->buffer_bytes()) {
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(slot_writer_mu_);
    slot_writer_ = std::move(writer);
  }
  shared_slots_->Activate();
  return true;
}

void WorkerSession::Heartbeat() {
  std::lock_guard<std::mutex> lock(mu_);
  TouchLocked();
  ++heartbeats_;
}

int64_t WorkerSession::heartbeats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heartbeats_;
}

bool WorkerSession::expired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return expired_;
}

void WorkerSession::SetExpiryHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  expiry_hook_ = std::move(hook);
}

bool WorkerSession::ExpireIfSilent(int64_t now, int64_t lease_ns, double* silence_s,
                                   std::function<void()>* hook) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return false;  // the transport ended it
    if (expired_) {
      // The transport did not end it since the last pass: it is stuck (a write to a trainer
      // that stopped reading, say). Ask it to cancel its call.
      if (!hook_fired_ && expiry_hook_) {
        hook_fired_ = true;
        *hook = expiry_hook_;
      }
      return false;
    }
    if (now - last_heard_ns_ < lease_ns) return false;
    expired_ = true;
    *silence_s = static_cast<double>(now - last_heard_ns_) / 1e9;
    // Free what the session holds at once; the transport gets the reason as its last output.
    work_.clear();
    splits_.clear();
    outputs_.clear();
    input_bytes_ = 0;
    unacked_bytes_ = 0;
    pending_bytes_ = 0;
    // The slot is free before the transport can see the error (session, then shared: the
    // order every path takes).
    {
      std::lock_guard<std::mutex> shared_lock(shared_->mu);
      if (!slot_released_) --shared_->open;
      shared_->Retire(info_.id);
      ++shared_->expired;
    }
    slot_released_ = true;
    FailLocked(absl::DeadlineExceededError(absl::StrFormat(
        "session lease expired: no message from the trainer for %.1f s (the worker's "
        "--session-lease-s is %.1f s)",
        *silence_s, static_cast<double>(lease_ns) / 1e9)));
  }
  return true;
}

void WorkerSession::AddCredit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  TouchLocked();
  unacked_bytes_ -= std::min<uint64_t>(bytes, unacked_bytes_);
  MaybeScheduleLocked();
  cv_.notify_all();
}

void WorkerSession::CloseInput() {
  std::lock_guard<std::mutex> lock(mu_);
  input_closed_ = true;
  cv_.notify_all();
}

void WorkerSession::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    work_.clear();
    input_bytes_ = 0;
    outputs_.clear();
    expiry_hook_ = nullptr;  // it may hold the transport's call, which is ending
    cv_.notify_all();
  }
  ReleaseSlot();
}

void WorkerSession::Fail(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  FailLocked(std::move(status));
}

void WorkerSession::BeginDrain(double deadline_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || cancelled_ || failed_) return;
  draining_ = true;
  WorkerOutput out;
  out.kind = WorkerOutput::Kind::kDraining;
  out.deadline_s = deadline_s;
  out.held_splits = splits_.size();
  outputs_.push_back(std::move(out));
  cv_.notify_all();
}

size_t WorkerSession::HandBack(std::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!draining_ || cancelled_ || failed_) return 0;
  // Running samples and encodings of these splits find them gone and drop their output, so
  // no chunk of a returned split follows its kSplitReturned.
  const size_t n = splits_.size();
  for (const auto& [split_id, split] : splits_) {
    WorkerOutput out;
    out.kind = WorkerOutput::Kind::kSplitReturned;
    out.split_id = split_id;
    out.reason = std::string(reason);
    outputs_.push_back(std::move(out));
  }
  splits_.clear();
  work_.clear();
  input_bytes_ = 0;
  pending_bytes_ = 0;
  returned_ += static_cast<int64_t>(n);
  cv_.notify_all();
  return n;
}

bool WorkerSession::draining() const {
  std::lock_guard<std::mutex> lock(mu_);
  return draining_;
}

int64_t WorkerSession::returned_splits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return returned_;
}

size_t WorkerSession::buffered_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return BufferedLocked();
}

size_t WorkerSession::peak_buffered_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_buffered_;
}

void WorkerSession::NotePeakLocked() {
  peak_buffered_ = std::max(peak_buffered_, BufferedLocked());
}

WorkerSession::Depths WorkerSession::depths() const {
  std::lock_guard<std::mutex> lock(mu_);
  Depths d;
  d.open_splits = static_cast<int64_t>(splits_.size());
  d.queued_inputs = static_cast<int64_t>(work_.size());
  d.queued_outputs = static_cast<int64_t>(outputs_.size());
  d.buffered_bytes = static_cast<int64_t>(BufferedLocked());
  return d;
}

std::vector<WorkerOpMetrics> WorkerSession::Metrics() const {
  std::vector<WorkerOpMetrics> out;
  std::vector<pipeline::OpStatsSnapshot> snap = stats_->SnapshotOps();
  for (int i = first_op_; i < end_op_ && i < static_cast<int>(snap.size()); ++i) {
    WorkerOpMetrics m;
    m.name = snap[i].name;
    m.position = i;
    m.samples = snap[i].samples;
    m.cpu_ns = snap[i].cpu_ns;
    m.bytes_out = snap[i].bytes_out;
    m.errors = snap[i].errors;
    out.push_back(std::move(m));
  }
  return out;
}

bool WorkerSession::AdmissibleLocked() const {
  const size_t buffered = BufferedLocked();
  if (running_ == 0 && buffered == 0) return true;  // progress, even for an oversized sample
  if (max_estimate_ == 0) return false;             // no size known yet: one sample at a time
  return buffered + (running_ + 1) * max_estimate_ <= window_;
}

void WorkerSession::MaybeScheduleLocked() {
  if (cancelled_ || failed_) return;
  // Up to every thread of the pool: which session a free thread serves is the fair share's
  // choice (Shared::RunNext), so a session alone gets the whole worker.
  const size_t threads = static_cast<size_t>(std::max(1, shared_->threads));
  while (!work_.empty() && running_ < threads && AdmissibleLocked()) {
    ++running_;
    if (!Shared::Enqueue(shared_, info_.id)) {
      --running_;
      return;
    }
  }
}

void WorkerSession::EndTaskLocked(int64_t cpu_start) {
  // Charged before the task counts as ended, so that a session seen finished is no longer
  // being served.
  const int64_t cpu = ThreadCpuNanos() - cpu_start;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->fair.Charge(info_.id, cpu, shared_->Now());
    shared_->task_cpu_ns += cpu;
    own_task_cpu_ns_ += cpu;
  }
  --running_;
}

Status WorkerSession::Process(Element& element) const {
  return pipeline::ApplyStages(stages_, element);
}

void WorkerSession::RunOne() {
  const int64_t cpu_start = ThreadCpuNanos();
  WorkItem item;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ || failed_ || work_.empty()) {
      EndTaskLocked(cpu_start);
      cv_.notify_all();
      return;
    }
    item = std::move(work_.front());
    work_.pop_front();
    input_bytes_ -= item.bytes;
    ++splits_[item.split_id].running;
  }
  const SampleId id = item.element.id;
  Status status = Process(item.element);

  std::vector<FlushJob> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = splits_.find(item.split_id);
    if (cancelled_ || failed_ || it == splits_.end()) {
      EndTaskLocked(cpu_start);
      cv_.notify_all();
      return;
    }
    SplitState& split = it->second;
    --split.running;
    ++split.resolved;
    if (!status.ok()) {
      if (spec_.options.on_error == pipeline::OnError::kFail) {
        EndTaskLocked(cpu_start);
        FailLocked(status);
        return;
      }
      split.skipped.push_back({id, std::string(status.message()), ErrorKind::kData});
      if (batch_) ResolveBatchLocked(item.split_id, split, item.position, std::nullopt, &jobs);
    } else {
      const size_t estimate = WireEstimate(item.element, SlotWriter().get());
      max_estimate_ = std::max(max_estimate_, estimate);
      pending_bytes_ += estimate;
      NotePeakLocked();
      if (batch_) {
        ResolveBatchLocked(item.split_id, split, item.position, std::move(item.element), &jobs);
      } else {
        split.pending.push_back(std::move(item.element));
        split.pending_estimate += estimate;
      }
    }
    if (!batch_) CollectFlushesLocked(item.split_id, split, &jobs);
    if (jobs.empty()) MaybeFinishSplitLocked(item.split_id);
  }
  for (FlushJob& job : jobs) Flush(std::move(job));
  std::lock_guard<std::mutex> lock(mu_);
  EndTaskLocked(cpu_start);
  MaybeScheduleLocked();
  // NextOutput waits for an output, a failure, the end, or the session to finish. What this
  // task queued was announced where it was queued (Flush, MaybeFinishSplitLocked, FailLocked),
  // so the task's end matters only when it finished the session: waking the transport's
  // thread for every sample cost a worker two context switches a sample for nothing.
  if (FinishedLocked()) cv_.notify_all();
}

bool WorkerSession::NextRunsSplitLocked(uint64_t split_id) const {
  if (work_.empty() || work_.front().split_id != split_id) return false;
  // Called from the ending task, still counted in running_: after it ends, the session
  // schedules its next task when buffered + (running_ - 1 + 1) * max_estimate_ fits the
  // window (AdmissibleLocked).
  return max_estimate_ > 0 && BufferedLocked() + running_ * max_estimate_ <= window_;
}

void WorkerSession::CollectFlushesLocked(uint64_t split_id, SplitState& split,
                                         std::vector<FlushJob>* jobs) {
  if (split.pending.empty()) return;
  const bool complete = split.resolved == split.total;
  // Flush when the chunk is big enough, the split is complete, or nothing else of the split
  // is running and its next sample is not about to start. Waiting for a sample that may not
  // start could stall (the session may be out of credit, or another split's work is first);
  // one about to start adds to this chunk. A chunk per sample had cost the trainer a
  // message, a wake-up and a credit for every sample (docs/offload.md).
  if (split.pending_estimate >= chunk_target() || complete ||
      (split.running == 0 && !NextRunsSplitLocked(split_id))) {
    FlushJob job;
    job.split_id = split_id;
    job.elements = std::move(split.pending);
    job.estimate = split.pending_estimate;
    split.pending.clear();
    split.pending_estimate = 0;
    ++split.encoding;
    jobs->push_back(std::move(job));
  }
}

void WorkerSession::ResolveBatchLocked(uint64_t split_id, SplitState& split, size_t position,
                                       std::optional<Element> element,
                                       std::vector<FlushJob>* jobs) {
  pipeline::SplitGroups::Ready ready = split.groups->Resolve(position, std::move(element));
  for (std::vector<Element>& members : ready.batches) {
    FlushJob job;
    job.split_id = split_id;
    for (const Element& e : members) job.estimate += WireBytesUpperBound(e);
    job.elements = std::move(members);
    job.batch = true;
    ++split.encoding;
    jobs->push_back(std::move(job));
  }
  // Dropped as the local batcher drops a short last batch; reported so the trainer accounts
  // for every sample of the split.
  for (const Element& e : ready.dropped) {
    split.skipped.push_back(
        {e.id, "dropped: short last batch of the split (drop_remainder)", ErrorKind::kDropped});
    pending_bytes_ -= std::min(pending_bytes_, WireBytesUpperBound(e));
  }
}

void WorkerSession::NoteChunkSent(size_t bytes, double seconds) {
  if (bytes == 0 || !(seconds > 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  // Smoothed over about four chunks: one send held up by the scheduler does not halve the
  // next chunks, a link that stays slow shrinks them within a few.
  const double s_per_byte = seconds / static_cast<double>(bytes);
  send_s_per_byte_ =
      send_s_per_byte_ > 0 ? 0.75 * send_s_per_byte_ + 0.25 * s_per_byte : s_per_byte;
  const double carried = kChunkCrossingS / send_s_per_byte_;
  const size_t floor = std::min(kMinChunkBytes, chunk_bytes_);
  const size_t target = carried >= static_cast<double>(chunk_bytes_)
                            ? chunk_bytes_
                            : std::max(floor, static_cast<size_t>(carried));
  chunk_target_.store(target, std::memory_order_relaxed);
}

void WorkerSession::Flush(FlushJob job) {
  // Encode outside the lock; split into several chunks if one would exceed the message limit.
  std::vector<WorkerOutput> chunks;
  Status status;
  const size_t limit = message_limit_ > kMessageOverhead ? message_limit_ - kMessageOverhead : 1;
  if (job.batch) {
    auto batch =
        pipeline::StackBatch(std::move(job.elements), built_.output_schema, batch_options_);
    if (!batch.ok()) {
      status = batch.status();
    } else {
      job.elements.clear();
      job.elements.push_back(*std::move(batch));
    }
  }
  // The shared slots, if any: a tensor the last op wrote into one goes as the slot's name.
  const std::shared_ptr<SlotArenaWriter> writer = SlotWriter();
  const SharedSlotOffset shared =
      writer == nullptr ? SharedSlotOffset()
                        : [&writer](const Tensor& t) { return writer->OffsetOf(t); };
  size_t begin = 0;
  while (status.ok() && begin < job.elements.size()) {
    size_t end = begin;
    size_t estimate = 0;
    do {
      estimate += WireEstimate(job.elements[end], writer.get());
      ++end;
    } while (end < job.elements.size() &&
             estimate + WireEstimate(job.elements[end], writer.get()) <=
                                              std::min(limit, chunk_target() * 2));
    std::vector<Element> group(std::make_move_iterator(job.elements.begin() + begin),
                               std::make_move_iterator(job.elements.begin() + end));
    // Uncompressed chunks leave the tensor bytes where they are; the gRPC server sends them
    // from there.
    auto encoded = codec_ == Codec::kNone ? EncodeElementsInPlace(group, shared)
                                          : EncodeElements(group, codec_);
    if (!encoded.ok()) {
      status = encoded.status();
      break;
    }
    if (encoded->wire_bytes() > limit) {
      status = WithKind(absl::ResourceExhaustedError(absl::StrCat(
          group.size() != 1 ? std::string("chunk")
          : group[0].members.empty()
              ? absl::StrCat("sample ", group[0].origin)
              : absl::StrCat("a batch of ", group[0].members.size(), " samples"),
          " is ", encoded->wire_bytes(), " bytes on the wire, over the message limit of ",
          message_limit_, " bytes (worker --max-message-bytes, trainer max_message_bytes)")),
                        ErrorKind::kMessageLimit);
      break;
    }
    WorkerOutput out;
    out.kind = WorkerOutput::Kind::kChunk;
    out.split_id = job.split_id;
    for (const Element& e : group) out.samples += SamplesIn(e);
    out.chunk = *std::move(encoded);
    chunks.push_back(std::move(out));
    begin = end;
  }

  std::lock_guard<std::mutex> lock(mu_);
  pending_bytes_ -= std::min(pending_bytes_, job.estimate);
  auto it = splits_.find(job.split_id);
  if (cancelled_ || failed_ || it == splits_.end()) return;
  --it->second.encoding;
  if (!status.ok()) {
    FailLocked(status);
    return;
  }
  WorkerCounters& counters = shared_->counters;
  for (WorkerOutput& out : chunks) {
    unacked_bytes_ += out.chunk.wire_bytes();
    it->second.delivered += out.samples;
    counters.samples_sent.fetch_add(static_cast<int64_t>(out.samples), std::memory_order_relaxed);
    counters.bytes_sent[static_cast<int>(codec_)].fetch_add(
        static_cast<int64_t>(out.chunk.wire_bytes()), std::memory_order_relaxed);
    outputs_.push_back(std::move(out));
  }
  NotePeakLocked();
  MaybeFinishSplitLocked(job.split_id);
  cv_.notify_all();
}

void WorkerSession::MaybeFinishSplitLocked(uint64_t split_id) {
  auto it = splits_.find(split_id);
  if (it == splits_.end()) return;
  SplitState& split = it->second;
  if (split.resolved != split.total || split.running != 0 || split.encoding != 0 ||
      !split.pending.empty()) {
    return;
  }
  if (batch_ && !split.groups->done()) return;
  WorkerOutput done;
  done.kind = WorkerOutput::Kind::kSplitDone;
  done.split_id = split_id;
  done.delivered = split.delivered;
  done.skipped = std::move(split.skipped);
  outputs_.push_back(std::move(done));
  splits_.erase(it);
  cv_.notify_all();
}

void WorkerSession::FailLocked(Status status) {
  if (failed_ || cancelled_) return;
  failed_ = true;
  shared_->counters.sessions_failed.fetch_add(1, std::memory_order_relaxed);
  work_.clear();
  input_bytes_ = 0;
  WorkerOutput out;
  out.kind = WorkerOutput::Kind::kError;
  out.error = std::move(status);
  outputs_.push_back(std::move(out));
  cv_.notify_all();
}

bool WorkerSession::FinishedLocked() const {
  return (input_closed_ || draining_) && work_.empty() && running_ == 0 && splits_.empty();
}

WorkerSession::Next WorkerSession::NextOutput(WorkerOutput* out, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t deadline = timeout_ms < 0 ? -1 : NowNanos() + timeout_ms * 1000000;
  while (true) {
    if (cancelled_) return Next::kEnd;
    const int64_t now = NowNanos();
    // Metrics that are due go before queued outputs: a worker whose link binds always has an
    // output queued, and behind it they never went (its trainer then had no fresh op costs,
    // CPU share or CPU reading from it for the whole run).
    const bool metrics_due = now >= next_metrics_ns_ && !failed_;
    if (!outputs_.empty() && !metrics_due) {
      // A chunk taken by the transport is still uncredited, so still counted in unacked_bytes_.
      *out = std::move(outputs_.front());
      outputs_.pop_front();
      return Next::kOutput;
    }
    if (failed_) return Next::kEnd;
    const bool finished = FinishedLocked();
    if (metrics_due || (finished && !final_metrics_sent_)) {
      next_metrics_ns_ = now + metrics_interval_ns_;
      if (finished) final_metrics_sent_ = true;
      lock.unlock();
      out->kind = WorkerOutput::Kind::kMetrics;
      out->metrics = Metrics();
      out->cpu_share = cpu_share();
      out->cpu_ns = cpu_ns();
      return Next::kOutput;
    }
    if (finished) {
      if (draining_ && !drained_sent_) {
        drained_sent_ = true;
        out->kind = WorkerOutput::Kind::kDrained;
        return Next::kOutput;
      }
      return Next::kEnd;
    }
    int64_t wake = next_metrics_ns_;
    if (deadline >= 0) {
      if (now >= deadline) return Next::kTimeout;
      wake = std::min(wake, deadline);
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(wake - now));
  }
}

// ---------------------------------------------------------------------------------------
// WorkerService

WorkerService::WorkerService(WorkerOptions options)
    : options_(std::move(options)), shared_(std::make_shared<WorkerSession::Shared>()) {
  if (options_.version.empty()) options_.version = SluiceVersion();
  if (options_.registry == nullptr) options_.registry = &ops::Registry::Builtin();
  if (!options_.data_root.empty()) {
    std::error_code ec;
    std::filesystem::path root = std::filesystem::absolute(options_.data_root, ec);
    if (!ec) options_.data_root = root.lexically_normal().string();
  }
  if (options_.read_limit_bytes_per_s > 0) {
    shared_->read_limiter = std::make_unique<ReadLimiter>(options_.read_limit_bytes_per_s);
  }
  ReadLimiter* limiter = shared_->read_limiter.get();
  const std::function<void(int64_t)> before_read =
      limiter == nullptr ? std::function<void(int64_t)>()
                         : [limiter](int64_t bytes) { limiter->Acquire(bytes); };
  if (options_.data_root.empty()) {
    shared_->files = ops::MakeNoStorage(
        "this worker was started without --data-root (it serves read=local sessions only)");
  } else {
    shared_->files =
        ops::MakeConfinedStorage(options_.data_root, options_.allow_symlinks_out, before_read);
  }
  ops::UrlOptions urls;
  urls.allowed_prefixes = options_.data_urls;
  urls.cache_dir = options_.cache_dir;
  urls.cache_max_bytes = options_.cache_max_bytes;
  urls.before_read = before_read;
  shared_->storage = ops::MakeUrlStorage(shared_->files.get(), urls);
  const CpuBudget budget = ProbeCpuBudget();
  const int threads = options_.threads > 0 ? options_.threads : budget.threads();
  cpu_budget_ = options_.threads > 0 ? std::min<double>(budget.cpus(), threads) : budget.cpus();
  shared_->threads = threads;
  shared_->cpu_budget = [threads = options_.threads] {
    const double cpus = ProbeCpuBudget().cpus();
    return threads > 0 ? std::min<double>(cpus, threads) : cpus;
  };
  shared_->max_sessions = options_.max_sessions;
  shared_->memory_budget =
      options_.max_total_bytes > 0 ? options_.max_total_bytes : DefaultMemoryBudget();
  shared_->clock = options_.clock;
  pool_ = std::make_unique<ThreadPool>(threads, "sluice-worker");
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->pool = pool_.get();
  }
  if (options_.session_lease_s > 0) {
    // A quarter of the lease: a silent session is closed within 1.25 leases. At most a
    // second, so that a long lease does not leave an expired session's call hanging long.
    const double period_s = std::clamp(options_.session_lease_s / 4, 0.01, 1.0);
    lease_thread_ = std::thread([this, period_s] {
      std::unique_lock<std::mutex> lock(lease_mu_);
      while (!lease_stop_) {
        lease_cv_.wait_for(lock, std::chrono::duration<double>(period_s));
        if (lease_stop_) break;
        lock.unlock();
        ExpireLeases();
        lock.lock();
      }
    });
  }
}

void WorkerService::Log(const std::string& message) const {
  if (options_.log) options_.log(message);
}

int WorkerService::ExpireLeases() {
  if (options_.session_lease_s <= 0) return 0;
  const int64_t lease_ns = static_cast<int64_t>(options_.session_lease_s * 1e9);
  std::vector<std::shared_ptr<WorkerSession>> all;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (const auto& weak : shared_->sessions) {
      if (std::shared_ptr<WorkerSession> s = weak.lock()) all.push_back(std::move(s));
    }
  }
  const int64_t now = shared_->Now();
  int expired = 0;
  for (const std::shared_ptr<WorkerSession>& s : all) {
    double silence_s = 0;
    std::function<void()> hook;
    if (s->ExpireIfSilent(now, lease_ns, &silence_s, &hook)) {
      ++expired;
      Log(absl::StrFormat(
          "session %d closed: its trainer sent nothing for %.1f s (--session-lease-s %g); "
          "its memory and slot are freed",
          s->info().id, silence_s, options_.session_lease_s));
    }
    if (hook) hook();
  }
  return expired;
}

int64_t WorkerService::expired_sessions() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->expired;
}

const WorkerCounters& WorkerService::counters() const { return shared_->counters; }

void WorkerService::CountRefused(const Status& status) const {
  WorkerCounters& c = shared_->counters;
  std::atomic<int64_t>* n = nullptr;
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      n = &c.refused_capacity;
      break;
    case absl::StatusCode::kInvalidArgument:
      n = &c.refused_spec;
      break;
    case absl::StatusCode::kFailedPrecondition:
      n = &c.refused_version;
      break;
    case absl::StatusCode::kUnauthenticated:
      n = &c.refused_unauthenticated;
      break;
    default:
      n = &c.refused_unavailable;
  }
  n->fetch_add(1, std::memory_order_relaxed);
}

std::vector<pipeline::OpStatsSnapshot> WorkerService::OpTotals() const {
  // The closed sessions' totals and the sessions not yet among them, in one critical section
  // of the lock ReleaseSlot adds them under: no session is counted twice or not at all.
  std::vector<pipeline::OpStatsSnapshot> out;
  std::vector<std::shared_ptr<WorkerSession>> open;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    out = shared_->retired_ops;
    for (const auto& weak : shared_->sessions) {
      std::shared_ptr<WorkerSession> s = weak.lock();
      if (s != nullptr && !s->retired_ && s->stats_ != nullptr) open.push_back(std::move(s));
    }
  }
  for (const auto& session : open) {
    for (const WorkerOpMetrics& m : session->Metrics()) {
      AddOpTotals(out, {m.name, m.samples, m.cpu_ns, m.bytes_out, m.errors});
    }
  }
  // A session between its last reference and its retirement is in neither list for a moment:
  // a total never goes below what an earlier scrape saw (Prometheus reads a drop as a reset).
  std::lock_guard<std::mutex> lock(shared_->mu);
  std::vector<pipeline::OpStatsSnapshot>& seen = shared_->reported_ops;
  for (pipeline::OpStatsSnapshot& op : out) {
    auto it = std::find_if(seen.begin(), seen.end(),
                           [&op](const pipeline::OpStatsSnapshot& s) { return s.name == op.name; });
    if (it == seen.end()) {
      seen.push_back(op);
      continue;
    }
    op.samples = it->samples = std::max(it->samples, op.samples);
    op.cpu_ns = it->cpu_ns = std::max(it->cpu_ns, op.cpu_ns);
    op.bytes_out = it->bytes_out = std::max(it->bytes_out, op.bytes_out);
    op.errors = it->errors = std::max(it->errors, op.errors);
  }
  return out;
}

WorkerService::~WorkerService() {
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    lease_stop_ = true;
    lease_cv_.notify_all();
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  Shutdown();
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->pool = nullptr;
  }
  pool_.reset();  // runs what is queued (cancelled sessions return at once), then joins
}

WorkerInfo WorkerService::Info(uint64_t client_id) const {
  WorkerInfo info;
  info.version = options_.version;
  info.ops = options_.registry->Names();
  info.cpu_budget = shared_->cpu_budget();
  info.threads = shared_->threads;
  std::lock_guard<std::mutex> lock(shared_->mu);
  info.active_session_weight = shared_->fair.ActiveWeight(shared_->Now(), client_id);
  return info;
}

Status WorkerService::CheckReadable(std::string_view path) const {
  return ops::CheckReadable(*shared_->storage, path);
}

StatusOr<double> WorkerService::MeasureReadRate(std::string_view path) const {
  return ops::MeasureReadRate(*shared_->storage, path);
}

int WorkerService::open_sessions() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->open;
}

std::vector<std::shared_ptr<WorkerSession>> WorkerService::Sessions() const {
  // Sessions lock their own mutex before the shared one: never the other way round.
  std::vector<std::shared_ptr<WorkerSession>> all;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (const auto& weak : shared_->sessions) {
      if (std::shared_ptr<WorkerSession> s = weak.lock()) all.push_back(std::move(s));
    }
  }
  std::vector<std::shared_ptr<WorkerSession>> out;
  for (std::shared_ptr<WorkerSession>& s : all) {
    bool open;
    {
      std::lock_guard<std::mutex> lock(s->mu_);
      open = !s->slot_released_;
    }
    if (open) out.push_back(std::move(s));
  }
  return out;
}

void WorkerService::Shutdown() {
  std::vector<std::weak_ptr<WorkerSession>> sessions;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->shutdown = true;
    sessions.swap(shared_->sessions);
  }
  for (auto& weak : sessions) {
    if (auto s = weak.lock()) s->Cancel();
  }
}

int WorkerService::BeginDrain(double deadline_s) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->draining) return 0;
    shared_->draining = true;
  }
  if (options_.on_drain) options_.on_drain();
  int told = 0;
  for (const std::shared_ptr<WorkerSession>& s : Sessions()) {
    s->BeginDrain(deadline_s);
    ++told;
  }
  return told;
}

bool WorkerService::draining() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->draining;
}

size_t WorkerService::HandBack() {
  size_t returned = 0;
  for (const std::shared_ptr<WorkerSession>& s : Sessions()) {
    const size_t n = s->HandBack("handed back: the worker's drain deadline (--drain-s) passed");
    if (n > 0) {
      Log(absl::StrFormat("session %d: %d splits handed back at the drain deadline", s->info().id,
                          n));
    }
    returned += n;
  }
  return returned;
}

StatusOr<std::shared_ptr<WorkerSession>> WorkerService::OpenSession(const OpenRequest& request) {
  if (request.client_version != options_.version) {
    return absl::FailedPreconditionError(
        absl::StrCat("version mismatch: the trainer runs sluice ",
                     request.client_version.empty() ? "(unknown)" : request.client_version,
                     ", this worker runs sluice ", options_.version));
  }
  auto parsed = pipeline::ParseSpec(request.spec_json, "trainer spec", *options_.registry);
  if (!parsed.ok()) {
    return Status(parsed.status().code(),
                  absl::StrCat("spec rejected by the worker: ", parsed.status().message()));
  }
  pipeline::PipelineSpec spec = *std::move(parsed);
  const int num_ops = static_cast<int>(spec.ops.size());
  const bool local_read = request.read_mode == ReadMode::kLocalRead;
  const int first_op = local_read ? 1 : 0;
  if (local_read && !pipeline::FirstOpReadsSample(spec, *options_.registry)) {
    return absl::InvalidArgumentError(
        "local_read needs ops[0] to be read_file (the trainer runs it and sends the bytes)");
  }
  if (!(request.weight > 0 && request.weight <= kMaxSessionWeight)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session weight ", request.weight, " is out of range: it must be > 0 and at most ",
        kMaxSessionWeight));
  }
  const bool after_batch = request.cut == kCutAfterBatch;
  const int end_op = after_batch ? num_ops : request.cut;
  if (!after_batch && (request.cut < first_op || request.cut > num_ops)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cut ", request.cut, " is out of range: the spec has ", num_ops,
                     " ops, so the cut is ", first_op, "..", num_ops,
                     local_read ? " in local_read mode" : "", ", or -1 for after batch"));
  }

  // Ops on this worker read through its storage (confined to --data-root, or none at all)
  // under its own limits; a spec may lower a limit, never raise it past the worker's.
  auto env = std::make_shared<ops::OpEnv>();
  env->storage = shared_->storage.get();
  env->limits.max_image_pixels =
      std::min(options_.limits.max_image_pixels, spec.options.limits.max_image_pixels);
  env->limits.max_file_bytes =
      std::min(options_.limits.max_file_bytes, spec.options.limits.max_file_bytes);
  // A session that would read files on a worker that reads none is refused now, not on
  // every sample.
  if (options_.data_root.empty() && options_.data_urls.empty()) {
    for (int i = first_op; i < end_op; ++i) {
      const ops::OpDef* def = options_.registry->Find(spec.ops[i].name);
      if (def != nullptr && def->schema.reads_files) {
        return absl::FailedPreconditionError(absl::StrCat(
            "ops[", i, "].", spec.ops[i].name,
            " would read files on this worker, which was started without --data-root: it "
            "serves read=local sessions only, with no file-reading op after the cut"));
      }
    }
  }

  // Every op is built, although only [first_op, end_op) runs here: a decoder before the cut
  // must learn about the crop or resize after it (SetScaleConsumer) exactly as in the
  // trainer, or it would decode at another scale and the pixels would differ.
  auto built = pipeline::BuildOps(spec.ops, spec.source.seed, *options_.registry,
                                  pipeline::SourceSchema(spec.source), 0, std::move(env));
  if (!built.ok()) {
    return Status(built.status().code(),
                  absl::StrCat("spec rejected by the worker: ", built.status().message()));
  }

  SessionInfo info;
  info.worker_version = options_.version;
  info.cpu_budget = cpu_budget_;
  info.threads = shared_->threads;
  const size_t requested = request.max_inflight_bytes > 0 ? request.max_inflight_bytes : 64 << 20;
  info.max_inflight_bytes = std::min(requested, options_.max_session_bytes);
  info.session_lease_s = std::max(0.0, options_.session_lease_s);

  std::shared_ptr<WorkerSession> session(new WorkerSession(shared_, info));
  WorkerSession& s = *session;
  s.spec_ = std::move(spec);
  s.built_ = *std::move(built);
  s.first_op_ = first_op;
  s.end_op_ = end_op;
  s.stats_ = std::make_unique<pipeline::PipelineStats>();
  s.stats_->Init(s.built_.names);
  s.input_schema_ = first_op == 0 ? s.built_.input_schema : s.built_.ops[0]->output_schema();
  s.batch_ = after_batch && s.spec_.batch.size > 0;
  if (s.batch_) {
    s.batch_options_ = pipeline::BatchOptionsOf(s.spec_.batch);
    auto schema = pipeline::BatchSchema(s.built_.output_schema, s.batch_options_);
    if (!schema.ok()) {
      return Status(schema.status().code(), absl::StrCat("spec rejected by the worker: batch: ",
                                                         schema.status().message()));
    }
  }
  s.codec_ = request.compression;
  s.window_ = info.max_inflight_bytes;
  s.max_input_bytes_ = options_.max_session_bytes;
  s.message_limit_ = options_.max_message_bytes;
  if (request.max_message_bytes > 0) {
    s.message_limit_ = std::min(s.message_limit_, request.max_message_bytes);
  }
  s.metrics_interval_ns_ =
      std::max<int64_t>(1000000, static_cast<int64_t>(options_.metrics_interval_s * 1e9));
  s.next_metrics_ns_ = NowNanos() + s.metrics_interval_ns_;
  s.stages_ = pipeline::MakeStages(s.built_, s.stats_.get(), first_op, end_op);
  // Shared slots (rpc/slot_arena.h) can be attached where the trainer only batches what it
  // receives: the largest field of the output, whose shape is fully known, gets slots whose
  // buffers come from the trainer's regions, active once they are attached (before, and in a
  // session that never gets any, the op writes as without slots).
  if (!s.batch_ && end_op == num_ops && end_op > first_op && s.spec_.batch.size > 0 &&
      s.codec_ == Codec::kNone && s.stages_.back().context.batch_slots.empty()) {
    // The fields the trainer's batcher takes slots for (the same rule), the largest of them.
    const int key =
        LargestSlotsField(pipeline::BatchSlotsFor(s.built_.output_schema, s.spec_.batch.size));
    if (key >= 0) {
      const FieldSpec& field = s.built_.output_schema.field(key);
      WorkerSession* self = &s;  // the stages, and so this source, are the session's
      s.shared_slots_ = std::make_shared<BatchSlots>(
          field.dtype, field.shape, s.spec_.batch.size,
          [self]() -> std::shared_ptr<Buffer> {
            const std::shared_ptr<SlotArenaWriter> writer = self->SlotWriter();
            return writer != nullptr ? writer->TakeRegion() : nullptr;
          });
      s.stages_.back().context.batch_slots[key] = s.shared_slots_;
    }
  }

  std::string opened;
  {
    // The session's own mutex before the shared one, the order everywhere else takes them.
    std::lock_guard<std::mutex> session_lock(s.mu_);
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->shutdown) return absl::UnavailableError("the worker is shutting down");
    if (shared_->draining) {
      return DrainingRefusal("the worker is draining (shutting down): it opens no new sessions");
    }
    if (shared_->open >= options_.max_sessions) {
      return absl::ResourceExhaustedError(
          absl::StrCat("worker at capacity: ", options_.max_sessions, " sessions"));
    }
    // The memory budget: the window and the input cap asked for, or what is left of the
    // budget split evenly between them.
    const size_t left =
        shared_->memory_budget - std::min(shared_->memory_budget, shared_->reserved);
    if (left < kMinReservation) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "worker memory budget exhausted: ", shared_->reserved, " of ", shared_->memory_budget,
          " bytes reserved by ", shared_->open, " sessions (--max-memory-bytes)"));
    }
    if (s.window_ + s.max_input_bytes_ > left) {
      s.window_ = std::min(s.window_, left / 2);
      s.max_input_bytes_ = left - s.window_;
      s.info_.max_inflight_bytes = s.window_;
    }
    s.chunk_bytes_ =
        std::max<size_t>(1, std::min({options_.chunk_bytes, s.message_limit_ / 2, s.window_ / 4}));
    s.chunk_target_.store(s.chunk_bytes_, std::memory_order_relaxed);
    s.reservation_ = s.window_ + s.max_input_bytes_;
    shared_->reserved += s.reservation_;
    ++shared_->open;
    shared_->counters.sessions_opened.fetch_add(1, std::memory_order_relaxed);
    s.info_.id = ++shared_->next_id;
    s.slot_released_ = false;
    s.last_heard_ns_ = shared_->Now();
    std::erase_if(shared_->sessions,
                  [](const std::weak_ptr<WorkerSession>& w) { return w.expired(); });
    shared_->sessions.push_back(session);
    shared_->fair.Add(s.info_.id, request.weight, request.client_id, shared_->Now());
    shared_->by_id[s.info_.id] = session;
    opened = absl::StrCat("session ", s.info_.id, " opened for ",
                          request.peer.empty() ? std::string("a trainer") : request.peer, ": cut ",
                          request.cut, ", ", local_read ? "local_read" : "remote_read", ", ",
                          shared_->open, " open");
  }
  Log(opened);
  return session;
}

}  // namespace sluice::rpc
