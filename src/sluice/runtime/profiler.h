// The profiler: what the adaptive policies measure while training runs, turned into the
// planners' input (policy::Profile, docs/policy.md "What is measured").
//
//   ConsumerMeter   the training loop's side: time spent waiting inside next() (the stall)
//                   and the time between calls (the accelerator's step), per batch;
//   CostsFromReport per-op CPU seconds and bytes out per sample from a Loader's counters,
//                   and the trainer's cost of receiving from its workers' streams;
//   WorkerFromProbe a worker's CPU budget (GetInfo), link bandwidth and RTT (the Probe RPC),
//                   and its own per-op costs when its session reported them in-band.
// ProbeCpuBudget() gives the trainer's CPU budget. Everything is counters and clocks that the
// pipeline keeps anyway: the profiler adds no work to the data path.
//
// ConsumerMeter is thread-compatible (the consumer thread); the functions are pure.
#ifndef SLUICE_RUNTIME_PROFILER_H_
#define SLUICE_RUNTIME_PROFILER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/stats.h"
#include "sluice/policy/profile.h"
#include "sluice/rpc/remote_stream.h"
#include "sluice/runtime/loader.h"

namespace sluice::runtime {

// Cumulative consumer counters since the meter started.
struct ConsumerCounters {
  int64_t batches = 0;
  int64_t samples = 0;
  int64_t wait_ns = 0;  // inside next()
  int64_t step_ns = 0;  // between a next() returning and the following call
  int64_t steps = 0;    // intervals counted in step_ns
};

// The difference of two snapshots, as rates over `wall_s`.
struct ConsumerWindow {
  double wall_s = 0;
  int64_t batches = 0;
  int64_t samples = 0;
  double wait_s = 0;
  double step_s = 0;  // per batch (0: not measured)

  double samples_per_s() const { return wall_s > 0 ? samples / wall_s : 0; }
  double stall_fraction() const;  // wait / (wait + stepping), in [0, 1]
};
ConsumerWindow Window(const ConsumerCounters& from, const ConsumerCounters& to, double wall_s);

class ConsumerMeter {
 public:
  // Around each next() call, with the clock (NowNanos) read by the caller.
  void Before(int64_t now_ns);
  void After(int64_t now_ns, int64_t samples);
  // Counts the time since the last After() as waiting, not stepping (work the loader did on
  // the consumer's thread after handing out a batch, e.g. switching plans).
  void ExtendWait(int64_t now_ns);
  // Leaves the time since the last After() out of both (the profiler's own work).
  void Exclude(int64_t now_ns);
  // The consumer paused (between passes): the time until the next Before() is neither a step
  // nor a wait, and no step is counted for it.
  void Pause() { last_return_ = -1; }
  const ConsumerCounters& counters() const { return counters_; }
  // The shortest step since the last call (0 if none): the accelerator's own step time. A
  // trainer whose CPU quota throttles it wakes late from some steps, which lengthens the mean
  // by 20-40% from one second to the next; the shortest is what the accelerator needs.
  int64_t TakeMinStepNs();

 private:
  ConsumerCounters counters_;
  int64_t min_step_ns_ = 0;
  int64_t call_start_ = 0;
  int64_t last_return_ = -1;
};

// Costs that are not measured directly (yet), from typical figures on a current x86 core;
// the closed loop re-fits what they get wrong.
struct CostDefaults {
  double source_bytes_per_sample = 100;      // a path and a label
  double batch_cpu_s_per_byte = 0.15e-9;     // stacking (a copy)
  double recv_cpu_s_per_sample = 5e-6;       // merge and accounting per sample received
  double recv_cpu_s_per_byte = 0.6e-9;       // wire decode and copies, uncompressed
  double send_cpu_s_per_byte = 0.3e-9;       // streaming a file up (local_read)
};

// The per-op costs of `local_ops` (a Loader's counters, spec order), ops that ran no sample
// keeping `fallback`'s entry when given. The receive costs come from the workers' stream
// counters when some bytes were received, else the defaults.
policy::Costs CostsFromReport(const pipeline::PipelineSpec& spec,
                              const std::vector<pipeline::OpStatsSnapshot>& local_ops,
                              const std::vector<WorkerReport>& workers,
                              const policy::Costs* fallback = nullptr,
                              const CostDefaults& defaults = {});

// The ops a Loader ran locally as policy::OpCost (only those that processed samples).
std::vector<policy::OpCost> OpCostsOf(const std::vector<pipeline::OpStatsSnapshot>& ops);
// A worker's in-band metrics as policy::OpCost (only ops that processed samples).
std::vector<policy::OpCost> OpCostsOf(const std::vector<rpc::WorkerOpMetrics>& metrics);

// The ops' counters from `was` to `now` (two snapshots of one Loader's ops): what each op
// cost over a window. The measuring window leaves out the Loader's first batch, whose ops
// cost 1.5-5x their steady figure (first touches of fresh buffers, first-call set-up), and the
// ops' costs are read over the same window, not since the start. An op with fewer than
// kMinFitSamples samples in the window keeps its counters since the start: a mean over a
// few samples is no better a figure than one with the start-up in it.
std::vector<pipeline::OpStatsSnapshot> OpStatsSince(
    const std::vector<pipeline::OpStatsSnapshot>& was,
    const std::vector<pipeline::OpStatsSnapshot>& now);

// What lz4 and zstd would do to the wire: ratio and CPU per raw byte, measured by compressing
// and decompressing `batch`'s bytes (at most the first 4 MiB) once here (the worker's compression cost is taken to be
// this machine's). The trainer's cost is `recv_cpu_s_per_byte` plus decompression. The ratio
// is that of the pipeline's output (measured_at_cut kCutAfterBatch: it holds after batching
// and at the last cut). Empty for under 4 KB of data.
std::vector<policy::CodecCost> MeasureCodecs(const Element& batch, double recv_cpu_s_per_byte);

// The same at the element-wise cuts before the last, 1..n-1 of `spec`'s n ops: the first
// `samples` samples of `files` (as the spec's source visits them, unshuffled) are run through
// the ops on the calling thread, and each cut's output (the tensors' bytes, at most 1 MiB a
// cut) is compressed and decompressed once, each cost marked measured_at_cut = that cut.
// Decoded pixels and normalized floats compress differently (policy.md, decision rule 5),
// so each cut has its own reading. A cut with under 4 KB of data has none (its data counts
// as incompressible). Best effort: a sample an op fails, or ops that cannot be built, end
// the reading with what was measured (the planner then plans as without it).
std::vector<policy::CodecCost> MeasureCodecsAtCuts(
    const pipeline::PipelineSpec& spec, std::shared_ptr<const pipeline::SourceFiles> files,
    double recv_cpu_s_per_byte, int samples = 2,
    const ops::Registry& registry = ops::Registry::Builtin());

policy::ConsumerProfile ConsumerFrom(const ConsumerWindow& window, int batch_size);

// The CPUs of a worker a new session of `weight` gets beside the sessions active there: the
// worker divides its budget between sessions by weight (rpc/fair_share.h).
double EntitledCpu(const rpc::WorkerInfo& info, double weight);

// The worker as the planner sees it; its CPU budget is what a session of `weight` from
// this trainer is entitled to there (EntitledCpu).
policy::WorkerProfile WorkerFromProbe(const rpc::LinkProbe& probe, double weight = 1);

// A source file to ask the workers about (can they read the data themselves?), when ops[0]
// is read_file: the first match of the spec's first pattern, or its first shard (a path or
// a URL); empty otherwise.
std::string StorageCheckPath(const pipeline::PipelineSpec& spec);

// Probes every worker at once (rpc::ProbeWorker through `connector`, ~0.1 s each); nullopt
// for those that fail, with the reason in *errors (same order). `check_path` (a source file)
// asks each worker whether it can read it itself.
std::vector<std::optional<rpc::LinkProbe>> ProbeWorkers(
    rpc::Connector& connector, const std::vector<rpc::ConnectOptions>& workers,
    std::vector<std::string>* errors, const std::string& check_path = "");

// What the trainer's whole process did while a Loader offloaded on uncompressed streams
// (differences of two readings): its CPU, its ops' CPU, the samples it handed out, the
// samples and payload bytes its workers delivered.
// The fewest samples a whole-process fit divides by: the process's CPU clock and the ops'
// counters are read at slightly different moments, and over a few hundred samples that skew
// is a small part of what is left.
inline constexpr int64_t kMinFitSamples = 256;

struct ReceiveWindow {
  double process_cpu_s = 0;
  double op_cpu_s = 0;
  int64_t samples_out = 0;
  int64_t remote_samples = 0;
  double bytes = 0;
};
// The trainer's cost of receiving that the window shows, offloading at `cut` in `read_mode`.
// The CPU not spent in ops, batching or the engine's local stages (the `known` costs, charged
// as the model charges them: local samples pay local_cpu_s_per_sample, offloaded ones the
// share of the stages they run here, read_file's too in local_read) goes to the
// one parameter the cut tells apart: after batching (elements of `batch_size` samples) the
// cost per byte, the per-element cost taken as known; otherwise the cost per element (a
// sample), the bytes taken at the known uncompressed rate, unless those bytes alone cost more
// than the window holds (the per-element rest would fall under 1 us): then the known rate per
// byte is what the window contradicts, and it is fitted as after batching. Clamped to sane
// bounds; nullopt under 32 MiB or 256 samples received.
struct ReceiveFit {
  std::optional<double> per_element;  // seconds per element received
  std::optional<double> per_byte;     // seconds per payload byte
};
std::optional<ReceiveFit> FitReceiveCost(const ReceiveWindow& w, int cut, ReadMode read_mode,
                                         int batch_size, const policy::Costs& known);

// What the trainer spends per sample all-local beyond its ops, from a window of the whole
// process: its CPU net of the ops', over the samples handed out. That holds batching (a copy
// of each sample into its batch, not timed on its own: `batch_cpu_s_per_sample` comes in as
// a typical figure, CostDefaults::batch_cpu_s_per_byte) and the engine's own work per sample
// (queues, hand-offs, the source: policy::Costs::local_cpu_s_per_sample). Batching keeps the
// figure given where the window holds that much, the rest being the engine's; where the
// window holds less, batching is what it holds and the engine's share is 0: a typical figure
// does not outvote a measurement (0.15 ns a byte had charged 90 us to each 602 KB sample, a
// fifth of unequal-workers' all-local cost, where the window held under that for both).
// nullopt under 256 samples (kMinFitSamples); never negative.
struct LocalFit {
  double batch_cpu_s_per_sample = 0;
  double local_cpu_s_per_sample = 0;
};
std::optional<LocalFit> FitLocalCost(const ReceiveWindow& w, double batch_cpu_s_per_sample);

// The trainer's CPU budget for planning: the CPUs it may use (cgroup aware), but no more
// than the threads a Loader runs per stage.
double TrainerCpuBudget(int threads);

}  // namespace sluice::runtime

#endif  // SLUICE_RUNTIME_PROFILER_H_
