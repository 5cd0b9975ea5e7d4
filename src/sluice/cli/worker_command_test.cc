#include "gtest/gtest.h"
#include "sluice/cli/commands.h"

namespace sluice::cli {
namespace {

TEST(WorkerCommandTest, LoopbackListenAddresses) {
  EXPECT_TRUE(IsLoopbackListenAddress("127.0.0.1:7070"));
  EXPECT_TRUE(IsLoopbackListenAddress("127.1.2.3:0"));
  EXPECT_TRUE(IsLoopbackListenAddress("localhost:7070"));
  EXPECT_TRUE(IsLoopbackListenAddress("[::1]:7070"));
  EXPECT_FALSE(IsLoopbackListenAddress("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackListenAddress("10.0.0.5:7070"));
  EXPECT_FALSE(IsLoopbackListenAddress("[::]:7070"));
  EXPECT_FALSE(IsLoopbackListenAddress("worker-0.example:7070"));
  EXPECT_FALSE(IsLoopbackListenAddress("128.0.0.1:7070"));
}

}  // namespace
}  // namespace sluice::cli
