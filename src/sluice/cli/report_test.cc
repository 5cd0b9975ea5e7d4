#include "sluice/cli/report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::cli {
namespace {

using ::testing::HasSubstr;

pipeline::OpStatsSnapshot Op(std::string name, int64_t samples, int64_t cpu_ns, int64_t bytes) {
  pipeline::OpStatsSnapshot s;
  s.name = std::move(name);
  s.samples = samples;
  s.cpu_ns = cpu_ns;
  s.bytes_out = bytes;
  return s;
}

RunReport SampleReport() {
  RunReport r;
  r.ops = {Op("read_file", /*samples=*/100, /*cpu_ns=*/10'000'000, /*bytes=*/100 * 50'000),
           Op("decode_jpeg", /*samples=*/100, /*cpu_ns=*/300'000'000, /*bytes=*/100 * 600'000)};
  r.source_samples = 100;
  r.samples = 100;
  r.batches = 2;
  r.wall_s = 0.5;
  r.threads = 2;
  r.cpu_budget = 2.0;
  r.peak_rss_bytes = 64 << 20;
  r.fingerprint = "0123456789abcdef";
  return r;
}

TEST(ComputeOpRowsTest, RatesSharesAndPerSampleNumbers) {
  const std::vector<OpRow> rows = ComputeOpRows(SampleReport().ops);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[0].samples_per_s, 100 / 0.01);
  EXPECT_DOUBLE_EQ(rows[1].samples_per_s, 100 / 0.3);
  EXPECT_DOUBLE_EQ(rows[1].cpu_ms_per_sample, 3.0);
  EXPECT_DOUBLE_EQ(rows[1].bytes_per_sample, 600'000);
  EXPECT_DOUBLE_EQ(rows[0].cpu_share + rows[1].cpu_share, 1.0);
  EXPECT_NEAR(rows[1].cpu_share, 300.0 / 310.0, 1e-12);
}

TEST(ComputeOpRowsTest, IdleOpsHaveZeroRatesNotNaN) {
  const std::vector<OpRow> rows = ComputeOpRows({Op("x", 0, 0, 0)});
  EXPECT_EQ(rows[0].samples_per_s, 0);
  EXPECT_EQ(rows[0].cpu_ms_per_sample, 0);
  EXPECT_EQ(rows[0].cpu_share, 0);
}

TEST(FormatTableTest, ShowsOpsTotalsAndSkips) {
  RunReport r = SampleReport();
  r.skipped = 7;
  r.skipped_names = {"a.jpg: bad", "b.jpg: bad", "c.jpg: bad", "d.jpg: bad",
                     "e.jpg: bad", "f.jpg: bad", "g.jpg: bad"};
  const std::string table = FormatTable(r);
  EXPECT_THAT(table, HasSubstr("decode_jpeg"));
  EXPECT_THAT(table, HasSubstr("333.3"));  // samples/s of decode_jpeg
  EXPECT_THAT(table, HasSubstr("3.000"));  // CPU ms per sample
  EXPECT_THAT(table, HasSubstr("585.9 KiB"));
  EXPECT_THAT(table, HasSubstr("96.8%"));
  EXPECT_THAT(table, HasSubstr("source: 100 samples, 200.0 samples/s"));
  EXPECT_THAT(table, HasSubstr("total:  100 samples in 2 batches, 200.0 samples/s, wall 0.50 s"));
  EXPECT_THAT(table, HasSubstr("peak RSS 64.0 MiB"));
  EXPECT_THAT(table, HasSubstr("skipped: 7\n  a.jpg: bad\n"));
  EXPECT_THAT(table, HasSubstr("  e.jpg: bad\n  ... and 2 more\n"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("f.jpg")));
}

TEST(ToJsonTest, CarriesEveryKey) {
  const nlohmann::json j = ToJson(SampleReport());
  EXPECT_DOUBLE_EQ(j["samples_per_s"].get<double>(), 200.0);
  EXPECT_EQ(j["batches"], 2);
  EXPECT_EQ(j["samples"], 100);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["cpu_budget"], 2.0);
  EXPECT_EQ(j["peak_rss_bytes"], 64 << 20);
  EXPECT_EQ(j["stall_fraction"], 0.0);
  EXPECT_EQ(j["time_to_plan_s"], 0.0);
  EXPECT_EQ(j["plan"]["policy"], "none");
  EXPECT_TRUE(j["plan"]["cut"].is_null());
  EXPECT_EQ(j["skipped"], 0);
  EXPECT_TRUE(j["skipped_names"].is_array());
  EXPECT_EQ(j["fingerprint"], "0123456789abcdef");
  ASSERT_EQ(j["ops"].size(), 2u);
  EXPECT_EQ(j["ops"][1]["name"], "decode_jpeg");
  EXPECT_DOUBLE_EQ(j["ops"][1]["cpu_ms_per_sample"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j["ops"][1]["cpu_s"].get<double>(), 0.3);
}

TEST(FormatBytesTest, PicksTheUnit) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3.5 * 1024 * 1024), "3.5 MiB");
  EXPECT_EQ(FormatBytes(2.0 * 1024 * 1024 * 1024), "2.0 GiB");
}

}  // namespace
}  // namespace sluice::cli
