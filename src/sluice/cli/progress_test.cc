#include "sluice/cli/progress.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace sluice::cli {
namespace {

constexpr int64_t kMs = 1'000'000;

std::string Contents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  return text;
}

TEST(ProgressLineTest, TtyRewritesInPlaceAtMostFourTimesASecond) {
  FILE* f = std::tmpfile();
  ProgressLine p(f, /*tty=*/true, /*start_ns=*/0);
  EXPECT_FALSE(p.Update(100 * kMs, "a"));
  EXPECT_TRUE(p.Update(250 * kMs, "b"));
  EXPECT_FALSE(p.Update(400 * kMs, "c"));
  EXPECT_TRUE(p.Update(500 * kMs, "d"));
  p.Finish();
  EXPECT_EQ(Contents(f), "\rb\x1b[K\rd\x1b[K\n");
  std::fclose(f);
}

TEST(ProgressLineTest, LogGetsFullLinesEveryTwoSeconds) {
  FILE* f = std::tmpfile();
  ProgressLine p(f, /*tty=*/false, /*start_ns=*/0);
  EXPECT_FALSE(p.Update(1000 * kMs, "a"));
  EXPECT_TRUE(p.Update(2000 * kMs, "b"));
  EXPECT_FALSE(p.Update(3999 * kMs, "c"));
  EXPECT_TRUE(p.Update(4000 * kMs, "d", /*force=*/false));
  EXPECT_TRUE(p.Update(4001 * kMs, "e", /*force=*/true));
  p.Finish();
  EXPECT_EQ(Contents(f), "b\nd\ne\n");
  std::fclose(f);
}

TEST(ProgressLineTest, FinishWithoutOutputPrintsNothing) {
  FILE* f = std::tmpfile();
  ProgressLine p(f, /*tty=*/true, /*start_ns=*/0);
  p.Finish();
  EXPECT_EQ(Contents(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace sluice::cli
