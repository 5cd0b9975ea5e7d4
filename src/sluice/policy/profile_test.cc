#include "sluice/policy/profile.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/policy/policy_test_util.h"

namespace sluice::policy {
namespace {

using ::testing::HasSubstr;

TEST(ProfileTest, JsonRoundTrip) {
  Profile p = testing::StandardProfile();
  p.costs.codecs.push_back(testing::Zstd());
  p.costs.recv_cpu_s_per_sample = 20e-6;
  p.costs.send_cpu_s_per_byte = 0.5e-9;
  p.costs.worker_cpu_s_per_sample = 30e-6;
  p.costs.worker_cpu_readings = 2;
  p.costs.receive_measured = true;
  p.workers[0].rtt_s = 0.0002;
  p.workers[0].has_storage = false;
  p.workers[0].storage_bytes_per_s = 20e6;
  p.workers[0].speed_factor = 1.5;
  p.workers[0].ops = {{"decode_jpeg", 1, 0.8e-3, 300e3}};
  const std::string text = ProfileToJsonString(p);
  StatusOr<Profile> back = ParseProfileJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ProfileToJsonString(*back), text);
  EXPECT_EQ(back->costs.codecs[1].codec, Codec::kZstd);
  EXPECT_FALSE(back->workers[0].has_storage);
  EXPECT_EQ(back->workers[0].ops[0].position, 1);
  EXPECT_EQ(back->costs.worker_cpu_s_per_sample, 30e-6);
  EXPECT_TRUE(back->costs.receive_measured);
  // An entry saved before the field existed reads as not measured.
  StatusOr<Costs> old = CostsFromJson(nlohmann::json::object());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(old->receive_measured);
}

TEST(ProfileTest, MissingFieldsTakeDefaults) {
  StatusOr<Profile> p = ParseProfileJson(R"({"consumer": {"batch_size": 32}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->consumer.batch_size, 32);
  EXPECT_EQ(p->trainer_cpu_budget, 1);
  EXPECT_TRUE(p->workers.empty());
}

TEST(ProfileTest, BadJsonSaysWhere) {
  const struct {
    std::string text;
    std::string error;
  } cases[] = {
      {"{", "not valid JSON"},
      {"[]", "profile: expected an object"},
      {R"({"trainer_cpu_budget": "two"})", "profile.trainer_cpu_budget: expected a number"},
      {R"({"consumer": {"batch_size": 1.5}})", "profile.consumer.batch_size: expected an integer"},
      {R"({"workers": [{"has_storage": 1}]})", "profile.workers[0].has_storage: expected true"},
      {R"({"costs": {"codecs": [{"codec": "snappy"}]}})", "unknown codec 'snappy'"},
      {R"({"costs": {"ops": [{"name": 3}]}})", "profile.costs.ops[0].name: expected a string"},
  };
  for (const auto& c : cases) {
    StatusOr<Profile> p = ParseProfileJson(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.error)) << c.text;
  }
}

TEST(ProfileTest, Validate) {
  EXPECT_TRUE(ValidateProfile(testing::StandardProfile()).ok());
  Profile p = testing::StandardProfile();
  p.costs.codecs[0].ratio = 0.5;
  EXPECT_THAT(std::string(ValidateProfile(p).message()), HasSubstr("costs.codecs[0].ratio"));
  p = testing::StandardProfile();
  p.consumer.batch_size = 0;
  EXPECT_THAT(std::string(ValidateProfile(p).message()), HasSubstr("batch_size"));
  p = testing::StandardProfile();
  p.trainer_cpu_budget = 0;
  EXPECT_THAT(std::string(ValidateProfile(p).message()), HasSubstr("trainer_cpu_budget"));
  p = testing::StandardProfile();
  p.workers[0].speed_factor = 0;
  EXPECT_THAT(std::string(ValidateProfile(p).message()), HasSubstr("workers[0].speed_factor"));
  p = testing::StandardProfile();
  p.consumer.stall_fraction = 1.5;
  EXPECT_FALSE(ValidateProfile(p).ok());
}

TEST(ProfileTest, NamesAndDemand) {
  EXPECT_STREQ(ReadModeName(ReadMode::kLocalRead), "local_read");
  EXPECT_STREQ(CodecName(Codec::kLz4), "lz4");
  EXPECT_EQ(*ParseReadMode("remote"), ReadMode::kRemoteRead);
  EXPECT_EQ(*ParseCodec("zstd"), Codec::kZstd);
  EXPECT_FALSE(ParseCodec("gzip").ok());
  ConsumerProfile c;
  c.batch_size = 64;
  c.step_s = 0.032;
  EXPECT_NEAR(c.DemandSamplesPerS(), 2000, 1e-9);
  c.step_s = 0;
  EXPECT_TRUE(std::isinf(c.DemandSamplesPerS()));
  Costs costs = testing::StandardProfile().costs;
  EXPECT_FALSE(costs.CostOf(Codec::kLz4).has_value());
  EXPECT_EQ(costs.CostOf(Codec::kNone)->trainer_cpu_s_per_byte, 1e-9);
  costs.codecs.clear();
  EXPECT_EQ(costs.CostOf(Codec::kNone)->ratio, 1);  // defaulted
}

}  // namespace
}  // namespace sluice::policy
