#include "sluice/rpc/worker_names.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::rpc {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

std::vector<std::string> Addresses(const ExpandedWorkers& e) {
  std::vector<std::string> out;
  for (const ConnectOptions& c : e.workers) out.push_back(c.address);
  return out;
}

ConnectOptions Worker(std::string address) {
  ConnectOptions c;
  c.address = std::move(address);
  c.token = "secret";
  c.tls_ca_file = "/ca.pem";
  return c;
}

TEST(WorkerNamesTest, PlainAddressesPassThrough) {
  auto e = ExpandWorkerNames({Worker("10.0.0.1:7070"), Worker("[::1]:7070")});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Addresses(*e), (std::vector<std::string>{"10.0.0.1:7070", "[::1]:7070"}));
  EXPECT_TRUE(e->notes.empty());
  EXPECT_EQ(e->workers[0].tls_server_name, "");
}

TEST(WorkerNamesTest, ANameBecomesOneWorkerPerAddressCheckedAgainstTheName) {
  const Resolver fake = [](const std::string& name) -> StatusOr<std::vector<std::string>> {
    EXPECT_EQ(name, "sluice-workers");
    return std::vector<std::string>{"10.1.0.4", "10.1.0.7", "fd00::5"};
  };
  auto e = ExpandWorkerNames({Worker("dns:sluice-workers:7070"), Worker("10.1.0.7:7070")}, fake);
  ASSERT_TRUE(e.ok()) << e.status();
  // The plain entry repeats an address of the name: kept once.
  EXPECT_EQ(Addresses(*e),
            (std::vector<std::string>{"10.1.0.4:7070", "10.1.0.7:7070", "[fd00::5]:7070"}));
  for (const ConnectOptions& c : e->workers) {
    EXPECT_EQ(c.tls_server_name, "sluice-workers");
    EXPECT_EQ(c.token, "secret");  // the entry's other fields are copied
    EXPECT_EQ(c.tls_ca_file, "/ca.pem");
  }
  ASSERT_EQ(e->notes.size(), 1u);
  EXPECT_THAT(e->notes[0], HasSubstr("dns:sluice-workers:7070: 3 workers (10.1.0.4:7070"));
}

TEST(WorkerNamesTest, ANameWithoutAddressesGivesNoWorkerAndSaysWhy) {
  const Resolver none = [](const std::string& name) -> StatusOr<std::vector<std::string>> {
    return absl::NotFoundError("cannot resolve '" + name + "': Name or service not known");
  };
  auto e = ExpandWorkerNames({Worker("dns:gone:7070"), Worker("10.0.0.1:7070")}, none);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Addresses(*e), (std::vector<std::string>{"10.0.0.1:7070"}));
  ASSERT_EQ(e->notes.size(), 1u);
  EXPECT_THAT(e->notes[0], HasSubstr("dns:gone:7070: no workers (cannot resolve 'gone'"));
}

TEST(WorkerNamesTest, MalformedNamesAreInvalid) {
  for (const char* bad : {"dns:name", "dns:name:0", "dns:name:70000", "dns::7070", "dns:n:x"}) {
    auto e = ExpandWorkerNames({Worker(bad)});
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(bad));
  }
}

// The system resolver on a name /etc/hosts answers (no network involved).
TEST(WorkerNamesTest, LocalhostResolvesThroughTheSystemResolver) {
  auto e = ExpandWorkerNames({Worker("dns:localhost:7070")});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(Addresses(*e), Contains("127.0.0.1:7070"));
  EXPECT_EQ(e->workers[0].tls_server_name, "localhost");
}

}  // namespace
}  // namespace sluice::rpc
