// The testbed's shaping and CPU quotas measure within 10% of the spec (needs root).
//
// These tests time real transfers and busy loops, so other load on the machine would lower
// what they measure: ctest runs this file's tests alone (RUN_SERIAL, see CMakeLists.txt).
// A quota is a ceiling, so a CPU figure above it is always a failure; one below it is
// measured again, up to three times, before the test gives up.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "sluice/testbed/testbed.h"
#include "sluice/testbed/verify.h"
#include "testbed_test_util.h"

namespace sluice::testbed {
namespace {

#define SKIP_WITHOUT_ROOT()                                   \
  if (!CanHostTestbed()) {                                    \
    GTEST_SKIP() << "needs root and a cgroup CPU controller"; \
  }

class TestbedMeasureTest : public ::testing::Test {
 protected:
  void TearDown() override { RemoveResourcesOfPid(getpid()); }
};

// The CPU share `host` gets with `cpus` as its quota: the best of up to three tries, each
// of which must stay under the ceiling.
double MeasuredCpus(const Testbed& tb, const Host& host, double cpus) {
  double best = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    StatusOr<CpuMeasurement> m = MeasureCpu(tb, host, /*seconds=*/2.0);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return 0;
    EXPECT_LE(m->measured_cpus, cpus * 1.10) << host.name << " ran over its quota";
    best = std::max(best, m->measured_cpus);
    if (WithinTolerance(best, cpus)) break;
  }
  return best;
}

TEST_F(TestbedMeasureTest, LinkRateMeasuresWithinTenPercent) {
  SKIP_WITHOUT_ROOT();
  TestbedSpec spec;
  spec.trainer_cpus = 0.5;
  spec.workers.push_back({0.5, 40e6, 0.002});
  StatusOr<std::unique_ptr<Testbed>> tb = Testbed::Create(spec);
  ASSERT_TRUE(tb.ok()) << tb.status();
  StatusOr<LinkMeasurement> m = MeasureLink(**tb, 0, /*seconds=*/1.5, /*max_bytes=*/64 << 20);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(WithinTolerance(m->measured_bps, 40e6)) << m->measured_bps;
  EXPECT_LT(m->goodput_bps, m->measured_bps);
  // Two 2 ms delays (one per direction) make the round trip at least 4 ms.
  if ((*tb)->latency_emulated()) {
    EXPECT_GE(m->rtt_s, 0.004);
  }
}

TEST_F(TestbedMeasureTest, CpuQuotaMeasuresWithinTenPercent) {
  SKIP_WITHOUT_ROOT();
  TestbedSpec spec;
  spec.trainer_cpus = 0.3;
  spec.workers.push_back({0.6, 0, 0});
  StatusOr<std::unique_ptr<Testbed>> tb = Testbed::Create(spec);
  ASSERT_TRUE(tb.ok()) << tb.status();
  for (const Host* h : {&(*tb)->trainer(), &(*tb)->worker(0)}) {
    const double measured = MeasuredCpus(**tb, *h, h->cpus);
    EXPECT_TRUE(WithinTolerance(measured, h->cpus)) << h->name << ": " << measured;
  }
  // A quota change takes effect.
  ASSERT_TRUE((*tb)->SetCpus((*tb)->worker(0), 0.2).ok());
  Host changed = (*tb)->worker(0);
  changed.cpus = 0.2;
  const double measured = MeasuredCpus(**tb, changed, 0.2);
  EXPECT_TRUE(WithinTolerance(measured, 0.2)) << measured;
}

}  // namespace
}  // namespace sluice::testbed
