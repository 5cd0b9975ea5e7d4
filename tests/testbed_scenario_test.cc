// Scenario files: the documented form parses; every kind of mistake is reported with the file,
// line, column and the path of the bad value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "sluice/testbed/scenario.h"

namespace sluice::testbed {
namespace {

using ::testing::HasSubstr;

constexpr char kExample[] = R"(name: image-7to21
pipeline: examples/pipelines/imagenet_randaugment.yaml
data: {kind: jpeg, count: 2000, seed: 1, width: 64}
trainer: {cpus: 0.5}
workers:
  - {cpus: 1.0, bandwidth: 1gbit, latency: 0.2ms, storage: shared}
  - {cpus: 1.5, bandwidth: 100mbit, storage: "slow:20MB"}
  - {cpus: 0.5, storage: none}
accelerator_ms: 30
steps: 400
events:
  - {at_s: 20, worker: 0, cpus: 0.5}
  - {at_s: 30, worker: 1, kill: true}
)";

TEST(TestbedScenarioTest, ParsesTheDocumentedForm) {
  StatusOr<Scenario> sc = ParseScenario(kExample, "s.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status();
  EXPECT_EQ(sc->name, "image-7to21");
  EXPECT_EQ(sc->pipeline, "examples/pipelines/imagenet_randaugment.yaml");
  EXPECT_EQ(sc->data_kind, "jpeg");
  EXPECT_EQ(sc->data_count, 2000);
  EXPECT_EQ(sc->data_seed, 1u);
  EXPECT_EQ(sc->data_options.at("width"), "64");
  EXPECT_DOUBLE_EQ(sc->trainer_cpus, 0.5);
  EXPECT_EQ(sc->trainer_frontend, "cli");
  ASSERT_EQ(sc->workers.size(), 3u);
  EXPECT_DOUBLE_EQ(sc->workers[0].cpus, 1.0);
  EXPECT_DOUBLE_EQ(sc->workers[0].bandwidth_bps, 1e9);
  EXPECT_DOUBLE_EQ(sc->workers[0].latency_s, 2e-4);
  EXPECT_EQ(sc->workers[0].storage, StorageKind::kShared);
  EXPECT_DOUBLE_EQ(sc->workers[1].bandwidth_bps, 1e8);
  EXPECT_EQ(sc->workers[1].storage, StorageKind::kSlow);
  EXPECT_DOUBLE_EQ(sc->workers[1].storage_bytes_per_s, 2e7);
  EXPECT_EQ(sc->workers[2].storage, StorageKind::kNone);
  EXPECT_DOUBLE_EQ(sc->workers[2].bandwidth_bps, 0);
  EXPECT_DOUBLE_EQ(sc->accelerator_ms, 30);
  EXPECT_EQ(sc->steps, 400);
  ASSERT_EQ(sc->events.size(), 2u);
  EXPECT_DOUBLE_EQ(sc->events[0].at_s, 20);
  EXPECT_EQ(sc->events[0].worker, 0);
  ASSERT_TRUE(sc->events[0].cpus.has_value());
  EXPECT_DOUBLE_EQ(*sc->events[0].cpus, 0.5);
  EXPECT_TRUE(sc->events[1].kill);
  EXPECT_FALSE(sc->events[1].cpus.has_value());

  const TestbedSpec spec = sc->ToTestbedSpec();
  EXPECT_DOUBLE_EQ(spec.trainer_cpus, 0.5);
  ASSERT_EQ(spec.workers.size(), 3u);
  EXPECT_DOUBLE_EQ(spec.workers[1].cpus, 1.5);
  EXPECT_DOUBLE_EQ(spec.workers[1].bandwidth_bps, 1e8);
}

// Replaces the first occurrence of `from` in the example.
std::string Edit(const std::string& from, const std::string& to) {
  std::string text = kExample;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

struct BadCase {
  const char* label;
  std::string yaml;
  std::string expected;  // a substring of the message
};

TEST(TestbedScenarioTest, DataOfEitherGeneratorBecomesGenDataFlags) {
  StatusOr<Scenario> wav = ParseScenario(
      Edit("kind: jpeg, count: 2000, seed: 1, width: 64",
           "kind: wav, count: 20, seed: 3, sample_rate: 22050"),
      "s.yaml");
  ASSERT_TRUE(wav.ok()) << wav.status();
  EXPECT_EQ(wav->data_kind, "wav");
  EXPECT_EQ(wav->data_options, (std::map<std::string, std::string>{{"sample-rate", "22050"}}));

  StatusOr<Scenario> boxes = ParseScenario(Edit("width: 64", "boxes: true"), "s.yaml");
  ASSERT_TRUE(boxes.ok()) << boxes.status();
  EXPECT_EQ(boxes->data_options, (std::map<std::string, std::string>{{"boxes", ""}}));
  StatusOr<Scenario> no_boxes = ParseScenario(Edit("width: 64", "boxes: false"), "s.yaml");
  ASSERT_TRUE(no_boxes.ok()) << no_boxes.status();
  EXPECT_TRUE(no_boxes->data_options.empty());
}

// A data set in shards, served from a store beside the trainer or beside every host.
TEST(TestbedScenarioTest, ShardsAndAStore) {
  StatusOr<Scenario> sc = ParseScenario(
      Edit("width: 64", "width: 64, format: tar, shard_size: 100") + "store: trainer\n",
      "s.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status();
  EXPECT_TRUE(sc->data_shards);
  EXPECT_EQ(sc->data_options.at("format"), "tar");
  EXPECT_EQ(sc->data_options.at("shard-size"), "100");
  EXPECT_EQ(sc->store, StoreAt::kTrainer);
  StatusOr<Scenario> beside = ParseScenario(
      Edit("width: 64", "width: 64, format: tar") + "store: workers\n", "s.yaml");
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_EQ(beside->store, StoreAt::kWorkers);
  StatusOr<Scenario> plain = ParseScenario(kExample, "s.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->data_shards);
  EXPECT_EQ(plain->store, StoreAt::kNone);
}

// A Python training loop as the trainer (bench/python_trainer.py).
TEST(TestbedScenarioTest, APythonTrainerIsAFrontend) {
  StatusOr<Scenario> py = ParseScenario(
      Edit("trainer: {cpus: 0.5}", "trainer: {cpus: 0.5, frontend: python}"), "s.yaml");
  ASSERT_TRUE(py.ok()) << py.status();
  EXPECT_EQ(py->trainer_frontend, "python");
  EXPECT_DOUBLE_EQ(py->trainer_cpus, 0.5);
}

// Several trainers on the trainer's host, the later ones starting later.
TEST(TestbedScenarioTest, SeveralTrainersShareTheWorkers) {
  StatusOr<Scenario> sc = ParseScenario(
      Edit("trainer: {cpus: 0.5}", "trainers: [{cpus: 0.4}, {cpus: 0.3, start_s: 10}]"),
      "s.yaml");
  ASSERT_TRUE(sc.ok()) << sc.status();
  EXPECT_DOUBLE_EQ(sc->trainer_cpus, 0.4);
  ASSERT_EQ(sc->more_trainers.size(), 1u);
  EXPECT_DOUBLE_EQ(sc->more_trainers[0].cpus, 0.3);
  EXPECT_DOUBLE_EQ(sc->more_trainers[0].start_s, 10);
  const TestbedSpec spec = sc->ToTestbedSpec();
  EXPECT_DOUBLE_EQ(spec.trainer_cpus, 0.4);
  EXPECT_EQ(spec.more_trainer_cpus, std::vector<double>{0.3});

  const BadCase cases[] = {
      {"both", kExample + std::string("trainers: [{cpus: 1}]\n"),
       "trainer: give either trainer (one) or trainers (a list)"},
      {"neither", Edit("trainer: {cpus: 0.5}\n", ""),
       "trainer: give either trainer (one) or trainers (a list)"},
      {"empty", Edit("trainer: {cpus: 0.5}", "trainers: []"), "trainers: expected a list of 1 to 16"},
      {"first starts late", Edit("trainer: {cpus: 0.5}", "trainers: [{cpus: 1, start_s: 2}]"),
       "trainers[0].start_s: the first trainer starts at 0"},
      {"bad key", Edit("trainer: {cpus: 0.5}", "trainers: [{cpus: 1}, {cpus: 1, frontend: cli}]"),
       "trainers[1].frontend: unknown key"},
      {"negative start", Edit("trainer: {cpus: 0.5}", "trainers: [{cpus: 1}, {cpus: 1, start_s: -1}]"),
       "trainers[1].start_s: must be >= 0"},
  };
  for (const BadCase& c : cases) {
    StatusOr<Scenario> bad = ParseScenario(c.yaml, "s.yaml");
    ASSERT_FALSE(bad.ok()) << c.label;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(c.expected)) << c.label;
  }
}

TEST(TestbedScenarioTest, ErrorsPointIntoTheFile) {
  const BadCase cases[] = {
      {"bad unit", Edit("bandwidth: 100mbit", "bandwidth: 100mbps"),
       "s.yaml:7:28: workers[1].bandwidth: bad bandwidth '100mbps'"},
      {"bad latency", Edit("latency: 0.2ms", "latency: fast"), "s.yaml:6:44: workers[0].latency:"},
      {"zero cpus", Edit("trainer: {cpus: 0.5}", "trainer: {cpus: 0}"),
       "s.yaml:4:17: trainer.cpus: must be > 0"},
      {"bad frontend", Edit("trainer: {cpus: 0.5}", "trainer: {cpus: 0.5, frontend: java}"),
       "trainer.frontend: expected cli (sluice train) or python (a Python training loop)"},
      {"unknown worker key", Edit("storage: none", "storge: none"),
       "s.yaml:8:17: workers[2].storge: unknown key"},
      {"bad storage", Edit("storage: none", "storage: nfs"),
       "workers[2].storage: expected shared, none or slow:<rate>"},
      {"bad slow rate", Edit("slow:20MB", "slow:20Mbit"), "workers[1].storage: bad byte rate"},
      {"event worker out of range", Edit("worker: 1, kill", "worker: 3, kill"),
       "s.yaml:13:24: events[1].worker: there are 3 workers"},
      {"event with both", Edit("kill: true", "kill: true, cpus: 1"),
       "events[1]: an event sets exactly one of cpus or kill"},
      {"missing steps", Edit("steps: 400\n", ""), "steps: missing"},
      {"unknown top-level key", Edit("steps: 400", "stepz: 400"),
       "s.yaml:10:1: stepz: unknown key"},
      {"bad count", Edit("count: 2000", "count: many"), "data.count: expected an integer"},
      {"bad kind", Edit("kind: jpeg", "kind: png"), "data.kind: supported kinds: jpeg, wav"},
      {"jpeg option on wav", Edit("kind: jpeg", "kind: wav"),
       "s.yaml:3:48: data.width: applies to kind: jpeg only"},
      {"wav option on jpeg", Edit("width: 64", "sample_rate: 16000"),
       "data.sample_rate: applies to kind: wav only"},
      {"bad sample rate", Edit("kind: jpeg, count: 2000, seed: 1, width: 64",
                               "kind: wav, count: 2000, seed: 1, sample_rate: 44100"),
       "data.sample_rate: expected 16000 or 22050"},
      {"bad boxes", Edit("width: 64", "boxes: maybe"), "data.boxes: expected true or false"},
      {"workers not a list", Edit("workers:\n", "workers: 3\nx:\n"), "workers"},
      {"syntax", "name: [unclosed", "s.yaml:1:"},
      {"bad format", Edit("width: 64", "format: zip"), "data.format: expected files or tar"},
      {"shard size without shards", Edit("width: 64", "shard_size: 10"),
       "data.shard_size: applies to format: tar only"},
      {"bad store", kExample + std::string("store: s3\n"),
       "store: expected none, trainer or workers"},
      {"store without shards", kExample + std::string("store: trainer\n"),
       "store: a store serves shards: the data set needs data: {format: tar}"},
  };
  for (const BadCase& c : cases) {
    StatusOr<Scenario> sc = ParseScenario(c.yaml, "s.yaml");
    ASSERT_FALSE(sc.ok()) << c.label;
    EXPECT_EQ(sc.status().code(), absl::StatusCode::kInvalidArgument) << c.label;
    EXPECT_THAT(std::string(sc.status().message()), HasSubstr(c.expected)) << c.label;
  }
}

TEST(TestbedScenarioTest, UnitParsers) {
  EXPECT_DOUBLE_EQ(*ParseBandwidth("10gbit"), 1e10);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("2.5Mbit"), 2.5e6);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("800kbit"), 8e5);
  EXPECT_FALSE(ParseBandwidth("10").ok());
  EXPECT_FALSE(ParseBandwidth("-1mbit").ok());
  EXPECT_FALSE(ParseBandwidth("mbit").ok());
  EXPECT_DOUBLE_EQ(*ParseLatency("250us"), 2.5e-4);
  EXPECT_DOUBLE_EQ(*ParseLatency("1s"), 1.0);
  EXPECT_FALSE(ParseLatency("3 parsecs").ok());
  EXPECT_DOUBLE_EQ(*ParseByteRate("20MB"), 2e7);
  EXPECT_DOUBLE_EQ(*ParseByteRate("1MiB/s"), 1048576.0);
  EXPECT_FALSE(ParseByteRate("20mb").ok());
}

}  // namespace
}  // namespace sluice::testbed
