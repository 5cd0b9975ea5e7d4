// ParallelMapIterator: applies a fused chain of ops to every element of its input on N
// threads.
//
// Each worker thread takes the next input element under a lock, runs every op on it in
// turn (timing each with the thread CPU clock into the op's counters), and hands the result
// to the consumer. Two delivery modes:
//   - unordered (default): first finished, first delivered;
//   - ordered (`deterministic`): delivered in input order through a reorder buffer.
// Memory is bounded: at most `max_in_flight` elements are taken from the input and not yet
// delivered (being processed or waiting), and workers take no new input while the waiting
// elements hold `max_buffered_bytes` or more.
// A sample an op fails on either ends the stream with "ops[i].<name>: <file>: <reason>"
// (OnError::kFail), or is dropped, counted and recorded in PipelineStats (kSkip).
//
// Thread-compatible for the consumer (iterator.h); Cancel() from any thread. The
// destructor cancels and joins the workers (a worker inside an op finishes that op first).
#ifndef SLUICE_PIPELINE_MAP_H_
#define SLUICE_PIPELINE_MAP_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/ops/op.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/iterator.h"
#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/stats.h"

namespace sluice::pipeline {

// One op of a fused chain, as the map runs it.
struct MapStage {
  const ops::Op* op = nullptr;
  ops::OpContext context;
  std::string label;               // "ops[3].normalize", used in errors
  OpCounters* counters = nullptr;  // may be null (no accounting)
  // Keeps what context.env points at alive for as long as the stage (the BuiltOps the stage
  // came from may be gone: executors keep only its ops).
  std::shared_ptr<const ops::OpEnv> env;
};

// Stages for ops [begin, end) of `built` (end < 0: to the last op), counted in
// `stats->op(i)` when stats is not null. REQUIRES: stats (if given) was Init()ed with at
// least `end` ops, in the same order.
std::vector<MapStage> MakeStages(const BuiltOps& built, PipelineStats* stats, int begin = 0,
                                 int end = -1);

// Runs `stages` on `element` in order. On failure returns the op's error as
// "ops[i].<name>: <element.origin>: <reason>" (same status code), counting it in the
// op's `errors`.
Status ApplyStages(const std::vector<MapStage>& stages, Element& element);

struct MapOptions {
  int threads = 1;             // worker threads, >= 1
  bool deterministic = false;  // deliver in input order
  OnError on_error = OnError::kFail;
  size_t max_in_flight = 0;        // elements taken and not yet delivered; 0: 2 * threads
  size_t max_buffered_bytes = 0;   // finished, undelivered bytes before workers pause; 0: none
  // Unordered delivery wakes a waiting consumer once this many results are ready (1: each),
  // or sooner when no more can come until it takes some (every element in flight is done,
  // the workers are at max_in_flight or max_buffered_bytes) or the stream ended or failed. A
  // batcher needs a batch before it can do anything: waking it per element only costs the
  // workers a wake-up each. Ordered delivery wakes it for each element in order.
  size_t wake_after = 1;
  PipelineStats* stats = nullptr;  // receives RecordSkip() under kSkip (may be null)
  // Under kSkip, also called for every dropped element (its id and origin are intact) with
  // the formatted error, from a worker thread. May be empty.
  std::function<void(const Element& element, const Status& error)> on_skip;
};

class ParallelMapIterator : public Iterator {
 public:
  // Starts the workers at once.
  static std::unique_ptr<ParallelMapIterator> Create(std::unique_ptr<Iterator> input,
                                                     std::vector<MapStage> stages,
                                                     Schema output_schema, MapOptions options);
  ~ParallelMapIterator() override;

  Status GetNext(Element* out, bool* end_of_stream) override;
  void Cancel() override;
  const Schema& schema() const override { return schema_; }

  // Elements taken from the input and not yet delivered (for tests of the memory bound).
  size_t in_flight() const;

 private:
  struct Result {
    Status status;
    Element element;
    bool skipped = false;
    size_t bytes = 0;
  };

  ParallelMapIterator(std::unique_ptr<Iterator> input, std::vector<MapStage> stages,
                      Schema output_schema, MapOptions options);
  void Start();
  void WorkerLoop();
  bool CanTakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeliverLocked(int64_t seq, Result result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<MapStage> stages_;
  const Schema schema_;
  const MapOptions options_;
  const size_t max_in_flight_;

  // Serialises the workers' calls into the input (one consumer at a time).
  std::mutex input_mu_;
  std::unique_ptr<Iterator> input_;
  int64_t next_seq_ ABSL_GUARDED_BY(input_mu_) = 0;
  bool input_finished_ ABSL_GUARDED_BY(input_mu_) = false;

  mutable std::mutex mu_;
  std::condition_variable can_take_;  // workers wait for room
  std::condition_variable ready_;     // the consumer waits for a result
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  size_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_taking_ ABSL_GUARDED_BY(mu_) = false;  // input ended, failed, or output failed
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Result> unordered_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Result> reorder_ ABSL_GUARDED_BY(mu_);
  int64_t next_out_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Sticky outcome once the stream ended or failed (consumer side).
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  Status final_status_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> threads_;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_MAP_H_
