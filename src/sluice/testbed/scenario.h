// Scenario: the cluster and job `sluice bench` sets up and runs, read from YAML:
//
//   name: image-7to21
//   pipeline: examples/pipelines/imagenet_train.yaml
//   data: {kind: jpeg, count: 2000, seed: 1}          # plus gen-data options (width, ...)
//   trainer: {cpus: 0.5}                              # or several:
//   trainers: [{cpus: 0.4}, {cpus: 0.4, start_s: 10}]
//   workers:
//     - {cpus: 1.0, bandwidth: 1gbit, latency: 0.2ms, storage: shared}
//   accelerator_ms: 30
//   steps: 400
//   store: trainer                                    # optional: none, trainer, workers
//   events:                                           # optional
//     - {at_s: 20, worker: 0, cpus: 0.5}
//     - {at_s: 30, worker: 1, kill: true}
//
// bandwidth: <number><bit|kbit|mbit|gbit> (decimal, as tc writes it); latency:
// <number><us|ms|s>; storage: shared (reads the data set), none (no data: only work on
// already-decoded elements), slow:<rate> with rate <number><B|KB|MB|GB|KiB|MiB|GiB> per
// second (a token bucket on the worker's reads). data: {format: tar, shard_size: N} packs the
// data set in tar shards as well (gen-data --format tar; the pipeline reads source.shards).
// store: where the data set is served over HTTP (a shards data set only): `trainer`, one
// store in the trainer's network namespace, which the trainer reads over loopback and the
// workers over their shaped links; `workers`, a store beside every host (its own namespace),
// so no host's reads cross a link; `none` (the default), the hosts' shared disk. A worker
// with storage none is not given the store's URL. trainers: several trainers (data-parallel
// ranks on one machine, or jobs sharing it) on the trainer's host, each in a cgroup of its
// own and all in its network namespace (they share its links), each running the whole job;
// trainers[k].start_s delays trainer k (the first starts at 0). Unknown keys are errors. Errors read
// `file:line:col: workers[1].bandwidth: message`.
// Plain values; the parser is thread-safe.
#ifndef SLUICE_TESTBED_SCENARIO_H_
#define SLUICE_TESTBED_SCENARIO_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/testbed/testbed.h"

namespace sluice::testbed {

enum class StorageKind { kShared, kNone, kSlow };
enum class StoreAt { kNone, kTrainer, kWorkers };

struct WorkerScenario {
  double cpus = 1.0;
  double bandwidth_bps = 0;  // 0: unshaped
  double latency_s = 0;
  StorageKind storage = StorageKind::kShared;
  double storage_bytes_per_s = 0;  // kSlow only
};

struct TrainerScenario {
  double cpus = 1.0;
  double start_s = 0;  // seconds after the first trainer starts
};

struct ScenarioEvent {
  double at_s = 0;
  int worker = 0;
  std::optional<double> cpus;  // new CPU quota
  bool kill = false;           // stop the worker
};

struct Scenario {
  std::string file;  // where it was read from ("" for text)
  std::string name;
  std::string pipeline;  // as written; see ResolvePipelinePath()
  std::string data_kind = "jpeg";
  int64_t data_count = 0;
  uint64_t data_seed = 1;
  std::map<std::string, std::string> data_options;  // further gen-data flags
  bool data_shards = false;  // data.format tar: packed in shards too (data_options has it)
  StoreAt store = StoreAt::kNone;
  double trainer_cpus = 1.0;
  // Trainers beside the first (`trainers:` lists the first, then these).
  std::vector<TrainerScenario> more_trainers;
  // What trains: "cli" (`sluice train`) or "python" (bench/python_trainer.py: the Python
  // loader in a training loop, with the same flags and report).
  std::string trainer_frontend = "cli";
  std::vector<WorkerScenario> workers;
  double accelerator_ms = 0;
  int64_t steps = 0;
  std::vector<ScenarioEvent> events;

  // The testbed shape of this scenario.
  TestbedSpec ToTestbedSpec() const;
  // `pipeline` as written if it exists, else relative to the scenario file's folder or the
  // nearest of its parent folders where it exists.
  std::string ResolvePipelinePath() const;
};

// Parses scenario YAML. `file` names the source in error messages.
StatusOr<Scenario> ParseScenario(std::string_view yaml, const std::string& file = "<scenario>");
// Reads and parses a scenario file.
StatusOr<Scenario> LoadScenario(const std::string& path);

// Value parsers (also used for flags): "100mbit" -> 1e8 bits/s, "0.2ms" -> 2e-4 s,
// "20MB" -> 2e7 bytes/s.
StatusOr<double> ParseBandwidth(std::string_view text);
StatusOr<double> ParseLatency(std::string_view text);
StatusOr<double> ParseByteRate(std::string_view text);

}  // namespace sluice::testbed

#endif  // SLUICE_TESTBED_SCENARIO_H_
