#include "sluice/policy/metric_store.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/policy/policy_test_util.h"

namespace sluice::policy {
namespace {

using ::testing::HasSubstr;

class MetricStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/sluice-metric-store-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  MetricStore Store(double now = 1e9, double max_age_s = 3600) {
    MetricStoreOptions o;
    o.dir = dir_ + "/cache/sluice";  // does not exist yet: Save creates it
    o.max_age_s = max_age_s;
    o.now_unix_s = [now] { return now; };
    return MetricStore(o);
  }

  std::string dir_;
  const MetricKey key_{"0123456789abcdef", HostFingerprint("Test CPU @ 3.0GHz", 2.5)};
};

TEST_F(MetricStoreTest, RoundTrip) {
  Costs costs = testing::StandardProfile().costs;
  costs.codecs.push_back(testing::Zstd());
  costs.batch_cpu_s_per_sample = 12e-6;
  costs.worker_cpu_s_per_sample = 25e-6;  // fitted in a run, kept for the next
  ASSERT_TRUE(Store().Save(key_, costs).ok());
  const MetricLoadResult r = Store(1e9 + 60).Load(key_);
  ASSERT_TRUE(r.costs.has_value()) << r.warning;
  EXPECT_EQ(r.warning, "");
  EXPECT_NEAR(r.age_s, 60, 1e-6);
  EXPECT_EQ(ToJson(*r.costs), ToJson(costs));
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/cache/sluice")) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".json");
  }
  EXPECT_EQ(files, 1);
  // Saving again replaces the entry.
  costs.ops[1].cpu_s_per_sample = 2e-3;
  ASSERT_TRUE(Store().Save(key_, costs).ok());
  EXPECT_EQ(Store().Load(key_).costs->ops[1].cpu_s_per_sample, 2e-3);
}

// The plans measured no faster than all-local travel with the costs; an entry without them
// (written before they were kept) is a hit with none, and a malformed one is ignored whole.
TEST_F(MetricStoreTest, LossesRoundTripWithTheCosts) {
  const Costs costs = testing::StandardProfile().costs;
  MeasuredPlan loss;
  loss.plan.offload = true;
  loss.plan.cut = 2;
  loss.plan.ratio = 0.74;
  loss.plan.worker_shares = {0.57, 0.17};
  loss.plan.read_mode = ReadMode::kLocalRead;
  loss.plan.codec = Codec::kLz4;
  loss.plan.local_spill_over = false;
  loss.plan.worker_addresses = {"10.0.0.2:7700", "10.0.1.2:7700"};
  loss.plan.predicted_samples_per_s = 1395;
  loss.measured = 1301;
  loss.local = 1365;
  loss.worker_cpus = {0.5, 1.5};
  loss.times_lost = 3;
  loss.runs_skipped = 2;
  ASSERT_TRUE(Store().Save(key_, costs, {loss}).ok());
  MetricLoadResult r = Store().Load(key_);
  ASSERT_TRUE(r.costs.has_value()) << r.warning;
  ASSERT_EQ(r.losses.size(), 1u);
  const MeasuredPlan& got = r.losses[0];
  EXPECT_EQ(static_cast<const Placement&>(got.plan), static_cast<const Placement&>(loss.plan));
  EXPECT_TRUE(got.plan.offload);
  EXPECT_EQ(got.plan.worker_addresses, loss.plan.worker_addresses);
  EXPECT_EQ(got.plan.predicted_samples_per_s, 1395);
  EXPECT_EQ(got.measured, 1301);
  EXPECT_EQ(got.local, 1365);
  EXPECT_EQ(got.worker_cpus, loss.worker_cpus);
  EXPECT_EQ(got.times_lost, 3);
  EXPECT_EQ(got.runs_skipped, 2);

  // Written before a loss had its counts: one loss, no run skipped since.
  nlohmann::json old_entry = ToJson(loss);
  old_entry.erase("times_lost");
  old_entry.erase("runs_skipped");
  StatusOr<MeasuredPlan> old_loss = MeasuredPlanFromJson(old_entry);
  ASSERT_TRUE(old_loss.ok()) << old_loss.status();
  EXPECT_EQ(old_loss->times_lost, 1);
  EXPECT_EQ(old_loss->runs_skipped, 0);
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(1.5), nlohmann::json("2"),
                                    nlohmann::json(kMaxTimesLost + 1)}) {
    nlohmann::json j = ToJson(loss);
    j["times_lost"] = bad;
    EXPECT_THAT(std::string(MeasuredPlanFromJson(j).status().message()),
                HasSubstr("times_lost is not a whole number in [1, 8]"))
        << bad.dump();
  }
  nlohmann::json negative = ToJson(loss);
  negative["runs_skipped"] = -1;
  EXPECT_THAT(std::string(MeasuredPlanFromJson(negative).status().message()),
              HasSubstr("runs_skipped is not a whole number"));

  ASSERT_TRUE(Store().Save(key_, costs).ok());
  r = Store().Load(key_);
  EXPECT_TRUE(r.costs.has_value()) << r.warning;
  EXPECT_TRUE(r.losses.empty());

  nlohmann::json j = ToJson(loss);
  j["worker_cpus"] = {0.5};  // one for two workers
  nlohmann::json file = nlohmann::json::parse(
      std::ifstream(Store().PathFor(key_)), nullptr, /*allow_exceptions=*/false);
  file["losses"] = nlohmann::json::array({j});
  std::ofstream(Store().PathFor(key_)) << file.dump();
  r = Store().Load(key_);
  EXPECT_FALSE(r.costs.has_value());
  EXPECT_TRUE(r.losses.empty());
  EXPECT_THAT(r.warning, HasSubstr("one worker_cpus entry per worker"));
}

// The plan a run ended on travels with the costs too; absent, none; malformed, the entry is
// ignored whole.
TEST_F(MetricStoreTest, ThePlanARunEndedOnRoundTripsWithTheCosts) {
  const Costs costs = testing::StandardProfile().costs;
  MeasuredPlan ended;
  ended.plan.offload = true;
  ended.plan.cut = kCutAfterBatch;
  ended.plan.ratio = 0.21;
  ended.plan.worker_shares = {0.21};
  ended.plan.local_spill_over = false;
  ended.plan.worker_addresses = {"10.0.0.2:7700"};
  ended.plan.predicted_samples_per_s = 2736;
  ended.measured = 2690;
  ended.local = 2331;
  ended.worker_cpus = {0.69};
  ASSERT_TRUE(Store().Save(key_, costs, {}, ended).ok());
  MetricLoadResult r = Store().Load(key_);
  ASSERT_TRUE(r.costs.has_value()) << r.warning;
  ASSERT_TRUE(r.ended_on.has_value());
  EXPECT_EQ(static_cast<const Placement&>(r.ended_on->plan),
            static_cast<const Placement&>(ended.plan));
  EXPECT_EQ(r.ended_on->plan.worker_addresses, ended.plan.worker_addresses);
  EXPECT_EQ(r.ended_on->measured, 2690);
  EXPECT_EQ(r.ended_on->local, 2331);
  EXPECT_EQ(r.ended_on->worker_cpus, ended.worker_cpus);

  ASSERT_TRUE(Store().Save(key_, costs).ok());
  r = Store().Load(key_);
  EXPECT_TRUE(r.costs.has_value()) << r.warning;
  EXPECT_FALSE(r.ended_on.has_value());

  nlohmann::json file = nlohmann::json::parse(std::ifstream(Store().PathFor(key_)), nullptr,
                                              /*allow_exceptions=*/false);
  nlohmann::json bad = ToJson(ended);
  bad["measured"] = -1;
  file["ended_on"] = bad;
  std::ofstream(Store().PathFor(key_)) << file.dump();
  r = Store().Load(key_);
  EXPECT_FALSE(r.costs.has_value());
  EXPECT_FALSE(r.ended_on.has_value());
  EXPECT_THAT(r.warning, HasSubstr("ended_on: a measured plan's measured is not a number >= 0"));
}

TEST_F(MetricStoreTest, MissIsSilent) {
  const MetricLoadResult r = Store().Load(key_);
  EXPECT_FALSE(r.costs.has_value());
  EXPECT_EQ(r.warning, "");
}

TEST_F(MetricStoreTest, CorruptFileIgnoredWithWarning) {
  MetricStore store = Store();
  ASSERT_TRUE(store.Save(key_, testing::StandardProfile().costs).ok());
  const std::string path = store.PathFor(key_);
  const struct {
    std::string contents;
    std::string why;
  } cases[] = {
      {"{\"format\": \"sluice-costs/1\", \"costs\": ", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {"{\"format\": \"other\"}", "format 'other'"},
      {"{\"format\": \"sluice-costs/1\", \"pipeline_fingerprint\": \"x\"}", "key does not match"},
      {absl::StrCat("{\"format\": \"sluice-costs/1\", \"pipeline_fingerprint\": \"",
                    key_.pipeline_fingerprint, "\", \"host_fingerprint\": \"",
                    key_.host_fingerprint,
                    "\", \"saved_at_unix_s\": 1e9, \"costs\": {\"ops\": 3}}"),
       "costs.ops: expected an array"},
      {absl::StrCat("{\"format\": \"sluice-costs/1\", \"pipeline_fingerprint\": \"",
                    key_.pipeline_fingerprint, "\", \"host_fingerprint\": \"",
                    key_.host_fingerprint,
                    "\", \"saved_at_unix_s\": 1e9, \"costs\": {\"ops\": [{\"cpu_s_per_sample\": "
                    "-1}]}}"),
       "must be a finite number >= 0"},
  };
  for (const auto& c : cases) {
    std::ofstream(path, std::ios::trunc) << c.contents;
    const MetricLoadResult r = store.Load(key_);
    EXPECT_FALSE(r.costs.has_value()) << c.contents;
    EXPECT_THAT(r.warning, HasSubstr("ignoring " + path)) << c.contents;
    EXPECT_THAT(r.warning, HasSubstr(c.why)) << c.contents;
  }
}

TEST_F(MetricStoreTest, StaleEntryIgnored) {
  ASSERT_TRUE(Store(/*now=*/1e9).Save(key_, testing::StandardProfile().costs).ok());
  EXPECT_TRUE(Store(/*now=*/1e9 + 3599).Load(key_).costs.has_value());
  const MetricLoadResult r = Store(/*now=*/1e9 + 2 * 86400).Load(key_);
  EXPECT_FALSE(r.costs.has_value());
  EXPECT_THAT(r.warning, HasSubstr("stale (saved 2.0 days ago"));
}

TEST_F(MetricStoreTest, KeyChangesWithFingerprints) {
  MetricStore store = Store();
  ASSERT_TRUE(store.Save(key_, testing::StandardProfile().costs).ok());
  MetricKey other_pipeline = key_;
  other_pipeline.pipeline_fingerprint = "fedcba9876543210";
  EXPECT_NE(store.PathFor(other_pipeline), store.PathFor(key_));
  EXPECT_FALSE(store.Load(other_pipeline).costs.has_value());
  MetricKey other_budget = key_;
  other_budget.host_fingerprint = HostFingerprint("Test CPU @ 3.0GHz", 4);
  EXPECT_NE(other_budget.host_fingerprint, key_.host_fingerprint);
  EXPECT_FALSE(store.Load(other_budget).costs.has_value());
  MetricKey other_cpu = key_;
  other_cpu.host_fingerprint = HostFingerprint("Other CPU", 2.5);
  EXPECT_NE(other_cpu.host_fingerprint, key_.host_fingerprint);
  EXPECT_TRUE(store.Load(key_).costs.has_value());
}

TEST_F(MetricStoreTest, BadKeyRejected) {
  const MetricKey bad{"../../etc", "x"};
  const Status s = Store().Save(bad, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Store().Load(bad).warning, HasSubstr("bad key"));
}

TEST_F(MetricStoreTest, UnwritableDirectoryIsAnError) {
  const std::string file = dir_ + "/a-file";
  std::ofstream(file) << "x";
  MetricStoreOptions o;
  o.dir = file + "/sub";  // a path under a regular file cannot be created
  const Status s = MetricStore(o).Save(key_, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cannot create"));
}

TEST(HostFingerprintTest, ParsesCpuinfoAndHashes) {
  const std::string cpuinfo =
      "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
      "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
  EXPECT_EQ(CpuModelFromCpuinfo(cpuinfo), "Intel(R) Xeon(R) CPU @ 2.20GHz");
  EXPECT_EQ(CpuModelFromCpuinfo("processor: 0\n"), "");
  const std::string h = HostFingerprint("Intel(R) Xeon(R) CPU @ 2.20GHz", 2);
  EXPECT_EQ(h.size(), 16u);
  EXPECT_EQ(h, HostFingerprint("Intel(R) Xeon(R) CPU @ 2.20GHz", 2.001));  // same to 0.01
  EXPECT_NE(h, HostFingerprint("Intel(R) Xeon(R) CPU @ 2.20GHz", 2.5));
  EXPECT_EQ(ProbeHostFingerprint(1).size(), 16u);
}

TEST(DefaultDirTest, FollowsXdgThenHome) {
  EXPECT_EQ(DefaultMetricStoreDir("/x/cache", "/home/u"), "/x/cache/sluice");
  EXPECT_EQ(DefaultMetricStoreDir("", "/home/u"), "/home/u/.cache/sluice");
  EXPECT_EQ(DefaultMetricStoreDir(nullptr, "/home/u"), "/home/u/.cache/sluice");
  EXPECT_EQ(DefaultMetricStoreDir(nullptr, nullptr), ".sluice-cache");
}

}  // namespace
}  // namespace sluice::policy
