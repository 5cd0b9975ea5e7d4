#include <httplib.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/metrics/exposition.h"
#include "sluice/metrics/http_server.h"

namespace sluice::metrics {
namespace {

using ::testing::HasSubstr;

TEST(ExpositionTest, WritesHelpTypeAndLabelledSamples) {
  std::vector<Family> families;
  families.push_back(Family::Counter("sluice_x_total", "Things done.")
                         .Add(3, {{"op", "decode"}})
                         .Add(4.5, {{"op", "crop"}}));
  families.push_back(Family::Gauge("sluice_sessions", "Open sessions.").Add(2));
  const std::string text = WriteText(families);
  EXPECT_EQ(text,
            "# HELP sluice_x_total Things done.\n"
            "# TYPE sluice_x_total counter\n"
            "sluice_x_total{op=\"decode\"} 3\n"
            "sluice_x_total{op=\"crop\"} 4.5\n"
            "# HELP sluice_sessions Open sessions.\n"
            "# TYPE sluice_sessions gauge\n"
            "sluice_sessions 2\n");
}

TEST(ExpositionTest, EscapesLabelValuesAndHelp) {
  const std::string text = WriteText(
      {Family::Gauge("g", "a \\ b\nc").Add(1, {{"path", "x\"y\\z\nw"}})});
  EXPECT_THAT(text, HasSubstr("# HELP g a \\\\ b\\nc\n"));
  EXPECT_THAT(text, HasSubstr("g{path=\"x\\\"y\\\\z\\nw\"} 1\n"));
}

TEST(ExpositionTest, NanCounterIsLeftOutAndSpecialGaugesAreSpelledOut) {
  const std::string text =
      WriteText({Family::Counter("c_total", "c").Add(std::nan("")),
                 Family::Gauge("g", "g").Add(std::nan("")).Add(1.0 / 0.0, {{"k", "v"}})});
  EXPECT_THAT(text, ::testing::Not(HasSubstr("\nc_total ")));
  EXPECT_THAT(text, HasSubstr("g NaN\n"));
  EXPECT_THAT(text, HasSubstr("g{k=\"v\"} +Inf\n"));
}

TEST(ExpositionTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Histogram h({0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.001, 0.005, 0.05, 2.0}) h.Observe(v);
  Family f = Family::Histogram("sluice_wait_seconds", "Wait.");
  f.histograms.push_back(h.Snapshot({{"side", "trainer"}}));
  const std::string text = WriteText({f});
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_wait_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("sluice_wait_seconds_bucket{side=\"trainer\",le=\"0.001\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("sluice_wait_seconds_bucket{side=\"trainer\",le=\"0.01\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("sluice_wait_seconds_bucket{side=\"trainer\",le=\"0.1\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("sluice_wait_seconds_bucket{side=\"trainer\",le=\"+Inf\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("sluice_wait_seconds_sum{side=\"trainer\"} 2.0565\n"));
  EXPECT_THAT(text, HasSubstr("sluice_wait_seconds_count{side=\"trainer\"} 5\n"));
}

TEST(ExpositionTest, ValidNamesFollowPrometheus) {
  EXPECT_TRUE(ValidName("sluice_worker_bytes_total"));
  EXPECT_TRUE(ValidName("a:b"));
  EXPECT_FALSE(ValidName("1abc"));
  EXPECT_FALSE(ValidName("a-b"));
  EXPECT_FALSE(ValidName("a:b", /*label=*/true));
  EXPECT_FALSE(ValidName("__name", /*label=*/true));
  EXPECT_FALSE(ValidName(""));
}

TEST(ExpositionTest, ExponentialBounds) {
  EXPECT_EQ(Histogram::ExponentialBounds(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

TEST(MetricsServerTest, ServesMetricsHealthAndReadiness) {
  int scrapes = 0;
  std::string why_not = "starting";
  auto server = MetricsServer::Start(
      "127.0.0.1:0",
      [&scrapes] {
        ++scrapes;
        return std::vector<Family>{Family::Counter("sluice_scrapes_total", "n").Add(scrapes)};
      },
      [&why_not] { return why_not; });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("sluice_scrapes_total 1\n"));
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  EXPECT_THAT(client.Get("/metrics")->body, HasSubstr("sluice_scrapes_total 2\n"));

  EXPECT_EQ(client.Get("/healthz")->status, 200);
  auto not_ready = client.Get("/readyz");
  EXPECT_EQ(not_ready->status, 503);
  EXPECT_EQ(not_ready->body, "starting\n");
  why_not.clear();
  EXPECT_EQ(client.Get("/readyz")->status, 200);
  EXPECT_EQ(client.Get("/nothing")->status, 404);
}

TEST(MetricsServerTest, BadAddressesAreClearErrors) {
  auto collect = [] { return std::vector<Family>{}; };
  auto bad = MetricsServer::Start("localhost", collect);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("metrics address 'localhost'"));
  bad = MetricsServer::Start("127.0.0.1:99999", collect);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("port must be a number"));

  auto first = MetricsServer::Start("127.0.0.1:0", collect);
  ASSERT_TRUE(first.ok());
  auto taken = MetricsServer::Start((*first)->address(), collect);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(taken.status().message(), HasSubstr((*first)->address()));
}

TEST(MetricsServerTest, SplitsHostAndPort) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("[::1]:9464", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9464);
  ASSERT_TRUE(SplitHostPort("0.0.0.0:0", &host, &port).ok());
  EXPECT_EQ(host, "0.0.0.0");
  EXPECT_FALSE(SplitHostPort(":80", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("[::1:80", &host, &port).ok());
}

}  // namespace
}  // namespace sluice::metrics
