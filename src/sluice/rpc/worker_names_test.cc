#include "sluice/rpc/worker_names.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
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

TEST(WorkerNamesTest, NamesWorkersOnlyForNamesAndFiles) {
  EXPECT_FALSE(NamesWorkers({Worker("10.0.0.1:7070")}));
  EXPECT_TRUE(NamesWorkers({Worker("10.0.0.1:7070"), Worker("dns:pool:7070")}));
  EXPECT_TRUE(NamesWorkers({Worker("file:/etc/sluice/workers")}));
}

// A file of its own, removed when the test ends.
class WorkerFile {
 public:
  explicit WorkerFile(const std::string& text)
      : path_(std::filesystem::temp_directory_path() /
              ("sluice-workers-" + std::to_string(getpid()) + "-" + std::to_string(next_++))) {
    Write(text);
  }
  ~WorkerFile() { std::filesystem::remove(path_); }
  // Rewrites it in place (the same inode, as an editor that truncates does).
  void Write(const std::string& text) const { std::ofstream(path_, std::ios::trunc) << text; }
  std::string path() const { return path_.string(); }

 private:
  static inline int next_ = 0;
  std::filesystem::path path_;
};

TEST(WorkerNamesTest, AFileListsWorkersOnePerLineNamesIncluded) {
  const WorkerFile file(
      "# the pool\n"
      "10.0.0.1:7070\n"
      "\n"
      "  10.0.0.2:7070   # rack 2\n"
      "dns:pool:7071\n"
      "10.0.0.1:7070\n");
  const Resolver fake = [](const std::string& name) -> StatusOr<std::vector<std::string>> {
    EXPECT_EQ(name, "pool");
    return std::vector<std::string>{"10.1.0.9"};
  };
  auto e = ExpandWorkerNames({Worker("file:" + file.path())}, fake);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Addresses(*e),
            (std::vector<std::string>{"10.0.0.1:7070", "10.0.0.2:7070", "10.1.0.9:7071"}));
  for (const ConnectOptions& c : e->workers) EXPECT_EQ(c.token, "secret");
  EXPECT_EQ(e->workers[0].tls_server_name, "");
  EXPECT_EQ(e->workers[2].tls_server_name, "pool");
  EXPECT_THAT(e->notes, Contains(HasSubstr("file:" + file.path() + ": 3 workers")));
  // Read again: a line gone, a line added.
  file.Write("10.0.0.2:7070\n10.0.0.3:7070\n");
  e = ExpandWorkerNames({Worker("file:" + file.path())}, fake);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Addresses(*e), (std::vector<std::string>{"10.0.0.2:7070", "10.0.0.3:7070"}));
}

TEST(WorkerNamesTest, AFileThatCannotBeReadGivesNoWorkerAndSaysWhy) {
  auto e = ExpandWorkerNames({Worker("file:/nonexistent/sluice-workers"), Worker("10.0.0.1:7070")});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Addresses(*e), (std::vector<std::string>{"10.0.0.1:7070"}));
  ASSERT_EQ(e->notes.size(), 1u);
  EXPECT_THAT(e->notes[0], HasSubstr("no workers (cannot read /nonexistent/sluice-workers)"));
}

TEST(WorkerNamesTest, AMalformedLineIsInvalidNamingTheFileAndLine) {
  for (const char* bad : {"worker-without-port", "host:0", "file:/etc/other", "dns:n:x"}) {
    const WorkerFile file(std::string("10.0.0.1:7070\n") + bad + "\n");
    auto e = ExpandWorkerNames({Worker("file:" + file.path())});
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(file.path() + ":2")) << bad;
  }
  EXPECT_FALSE(ExpandWorkerNames({Worker("file:")}).ok());
}

// The system resolver on a name with two addresses, then three, in a hosts file of the test's
// own: a child process in a private mount namespace (unshare) binds it over /etc/hosts, so
// the real getaddrinfo answers from it and nothing outside the child sees it.
TEST(WorkerNamesTest, TheSystemResolverSeesEveryAddressOfANameAndItsChanges) {
  const WorkerFile hosts("127.0.0.1 localhost\n10.77.0.2 sluice-pool.test\n"
                         "10.77.0.1 sluice-pool.test\n");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    std::string answer;
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount(hosts.path().c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
      answer = "skip: no private mount namespace here";
    } else {
      for (int round = 0; round < 2; ++round) {
        if (round == 1) {
          hosts.Write("127.0.0.1 localhost\n10.77.0.2 sluice-pool.test\n"
                      "10.77.0.3 sluice-pool.test\n10.77.0.1 sluice-pool.test\n");
        }
        auto e = ExpandWorkerNames({Worker("dns:sluice-pool.test:7070")});
        answer += e.ok() ? absl::StrJoin(Addresses(*e), ",") : std::string(e.status().message());
        answer += ";";
      }
    }
    (void)!write(fds[1], answer.data(), answer.size());
    _exit(0);
  }
  close(fds[1]);
  std::string answer;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) answer.append(buf, n);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (absl::StartsWith(answer, "skip:")) GTEST_SKIP() << answer;
  // Sorted, so that every trainer numbers the workers alike.
  EXPECT_EQ(answer,
            "10.77.0.1:7070,10.77.0.2:7070;10.77.0.1:7070,10.77.0.2:7070,10.77.0.3:7070;");
}

}  // namespace
}  // namespace sluice::rpc
