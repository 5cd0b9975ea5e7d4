#include "sluice/pipeline/map.h"

#include <pthread.h>

#include <new>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "sluice/core/clock.h"
#include "sluice/core/error_kind.h"

namespace sluice::pipeline {
namespace {

// Runs one op, turning what a library may throw into the sample's error: an allocation that
// fails (a size taken from hostile data or arguments) must cost the sample, which then
// follows on_error, not the process and everyone a worker serves.
Status ApplyOp(const MapStage& stage, Element& element) {
  try {
    return stage.op->Apply(element, stage.context);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory: an allocation failed");
  } catch (const std::length_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory: an allocation was too large (", e.what(), ")"));
  } catch (const cv::Exception& e) {
    // e.err is the bare reason; e.msg adds OpenCV's source file and line.
    return e.code == cv::Error::StsNoMem
               ? absl::ResourceExhaustedError(absl::StrCat("out of memory (OpenCV): ", e.err))
               : absl::InternalError(absl::StrCat("OpenCV error: ", e.err));
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("system error: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("unexpected exception: ", e.what()));
  }
}

// Runs the stages; on failure returns the op's own status and sets *failed to its index.
Status RunStages(const std::vector<MapStage>& stages, Element& element, int* failed) {
  // One reading of the thread's CPU clock between ops (a system call each, ~0.5 us): an op's
  // time runs from the previous op's end, so the counting between them goes to the next op.
  int64_t start = ThreadCpuNanos();
  for (size_t i = 0; i < stages.size(); ++i) {
    const MapStage& stage = stages[i];
    Status status = ApplyOp(stage, element);
    const int64_t end = ThreadCpuNanos();
    const int64_t cpu = end - start;
    start = end;
    if (stage.counters != nullptr) {
      OpCounters& c = *stage.counters;
      c.cpu_ns.fetch_add(cpu, std::memory_order_relaxed);
      if (status.ok()) {
        c.samples.fetch_add(1, std::memory_order_relaxed);
        c.bytes_out.fetch_add(static_cast<int64_t>(element.nbytes()), std::memory_order_relaxed);
      } else {
        c.errors.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (!status.ok()) {
      *failed = static_cast<int>(i);
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<MapStage> MakeStages(const BuiltOps& built, PipelineStats* stats, int begin, int end) {
  if (end < 0) end = static_cast<int>(built.ops.size());
  std::vector<MapStage> stages;
  for (int i = begin; i < end; ++i) {
    MapStage s;
    s.op = built.ops[i].get();
    s.context = built.contexts[i];
    s.label = built.Label(i);
    s.counters = stats != nullptr ? &stats->op(i) : nullptr;
    s.env = built.env;
    stages.push_back(std::move(s));
  }
  return stages;
}

namespace {

// An op's failure on `element`, as every caller reports it: "ops[N].name: <origin>: <why>",
// of kind ErrorKind::kData (what decides on_error and retries; not the wording).
Status OpFailure(const MapStage& stage, const Element& element, const Status& status) {
  return WithKind(Annotate(status, absl::StrCat(stage.label, ": ", element.origin)),
                  ErrorKind::kData);
}

}  // namespace

Status ApplyStages(const std::vector<MapStage>& stages, Element& element) {
  int failed = -1;
  Status status = RunStages(stages, element, &failed);
  if (status.ok()) return status;
  return OpFailure(stages[failed], element, status);
}

std::unique_ptr<ParallelMapIterator> ParallelMapIterator::Create(std::unique_ptr<Iterator> input,
                                                                 std::vector<MapStage> stages,
                                                                 Schema output_schema,
                                                                 MapOptions options) {
  std::unique_ptr<ParallelMapIterator> it(new ParallelMapIterator(
      std::move(input), std::move(stages), std::move(output_schema), options));
  it->Start();
  return it;
}

ParallelMapIterator::ParallelMapIterator(std::unique_ptr<Iterator> input,
                                         std::vector<MapStage> stages, Schema output_schema,
                                         MapOptions options)
    : stages_(std::move(stages)),
      schema_(std::move(output_schema)),
      options_(options),
      max_in_flight_(options.max_in_flight > 0
                         ? options.max_in_flight
                         : 2 * static_cast<size_t>(std::max(1, options.threads))),
      input_(std::move(input)) {}

void ParallelMapIterator::Start() {
  int n = std::max(1, options_.threads);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) {
    // The spec bounds `threads`, but the process or the machine may still refuse a thread
    // (RLIMIT_NPROC, a container's pids limit): run with those that started, and fail the
    // stream, not the process, when none did.
    try {
      threads_.emplace_back([this] { WorkerLoop(); });
    } catch (const std::system_error& e) {
      if (!threads_.empty()) break;
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      stop_taking_ = true;
      final_status_ = absl::ResourceExhaustedError(
          absl::StrCat("cannot start a thread to run the ops: ", e.what()));
      return;
    }
    std::string name = absl::StrCat("sluice-map-", i).substr(0, 15);
    pthread_setname_np(threads_.back().native_handle(), name.c_str());
  }
}

ParallelMapIterator::~ParallelMapIterator() {
  Cancel();
  for (std::thread& t : threads_) t.join();
}

void ParallelMapIterator::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    unordered_.clear();
    reorder_.clear();
    buffered_bytes_ = 0;
  }
  can_take_.notify_all();
  ready_.notify_all();
  input_->Cancel();
}

size_t ParallelMapIterator::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

bool ParallelMapIterator::CanTakeLocked() const {
  if (in_flight_ >= max_in_flight_) return false;
  return options_.max_buffered_bytes == 0 || buffered_bytes_ == 0 ||
         buffered_bytes_ < options_.max_buffered_bytes;
}

bool ParallelMapIterator::ReadyLocked() const {
  if (options_.deterministic) {
    return !reorder_.empty() && reorder_.begin()->first == next_out_seq_;
  }
  return !unordered_.empty();
}

void ParallelMapIterator::DeliverLocked(int64_t seq, Result result) {
  buffered_bytes_ += result.bytes;
  if (options_.deterministic) {
    reorder_.emplace(seq, std::move(result));
  } else {
    unordered_.push_back(std::move(result));
    // Until a group is ready, the consumer sleeps on as long as more results come without
    // it: an element is still being processed, or a worker may take a new one.
    const bool more_coming = !stop_taking_ && (unordered_.size() < in_flight_ || CanTakeLocked());
    if (unordered_.size() < options_.wake_after && more_coming) return;
  }
  ready_.notify_all();
}

void ParallelMapIterator::WorkerLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      can_take_.wait(lock, [&] { return cancelled_ || stop_taking_ || CanTakeLocked(); });
      if (cancelled_ || stop_taking_) return;
      ++in_flight_;
    }

    Element element;
    bool end_of_stream = false;
    Status input_status;
    int64_t seq = -1;
    {
      std::lock_guard<std::mutex> lock(input_mu_);
      if (input_finished_) {
        end_of_stream = true;
      } else {
        input_status = input_->GetNext(&element, &end_of_stream);
        if (!input_status.ok()) end_of_stream = false;
        if (!input_status.ok() || end_of_stream) input_finished_ = true;
        if (!end_of_stream) seq = next_seq_++;
      }
    }

    if (end_of_stream) {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      stop_taking_ = true;
      can_take_.notify_all();
      ready_.notify_all();
      return;
    }

    Result result;
    if (!input_status.ok()) {
      result.status = std::move(input_status);
      std::lock_guard<std::mutex> lock(mu_);
      stop_taking_ = true;
      can_take_.notify_all();
      if (!cancelled_) DeliverLocked(seq, std::move(result));
      return;
    }

    int failed = -1;
    Status status = RunStages(stages_, element, &failed);
    bool fatal = false;
    if (status.ok()) {
      result.bytes = element.nbytes();
      result.element = std::move(element);
    } else if (options_.on_error == OnError::kSkip) {
      result.skipped = true;
      if (options_.stats != nullptr) {
        options_.stats->RecordSkip(
            absl::StrCat(element.origin, ": ", stages_[failed].label, ": ", status.message()));
      }
      if (options_.on_skip) {
        options_.on_skip(element, OpFailure(stages_[failed], element, status));
      }
    } else {
      fatal = true;
      result.status = OpFailure(stages_[failed], element, status);
    }
    element = Element();  // release what a failed element held before taking the lock

    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    if (fatal) {
      // Elements taken before this one are already in flight, so ordered delivery can still
      // reach the error; nothing new is needed.
      stop_taking_ = true;
      can_take_.notify_all();
    }
    DeliverLocked(seq, std::move(result));
  }
}

Status ParallelMapIterator::GetNext(Element* out, bool* end_of_stream) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (cancelled_) return absl::CancelledError("pipeline cancelled");
    if (done_) {
      *end_of_stream = final_status_.ok();
      return final_status_;
    }
    ready_.wait(lock,
                [&] { return cancelled_ || ReadyLocked() || (stop_taking_ && in_flight_ == 0); });
    if (cancelled_) continue;
    if (!ReadyLocked()) {
      done_ = true;
      final_status_ = absl::OkStatus();
      continue;
    }
    Result result;
    if (options_.deterministic) {
      auto it = reorder_.begin();
      result = std::move(it->second);
      reorder_.erase(it);
      ++next_out_seq_;
    } else {
      result = std::move(unordered_.front());
      unordered_.pop_front();
    }
    --in_flight_;
    buffered_bytes_ -= result.bytes;
    can_take_.notify_all();
    if (result.skipped) continue;
    if (!result.status.ok()) {
      done_ = true;
      final_status_ = result.status;
      stop_taking_ = true;
      can_take_.notify_all();
      return final_status_;
    }
    *out = std::move(result.element);
    *end_of_stream = false;
    return absl::OkStatus();
  }
}

}  // namespace sluice::pipeline
