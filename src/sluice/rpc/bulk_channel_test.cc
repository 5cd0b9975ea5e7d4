// The bulk data channel's sockets on loopback: a connection is handed to the session whose
// key it presents, once; anything else is closed unread; bytes arrive whole and in order;
// a peer that goes away is an error with the count, never a signal.
#include "sluice/rpc/bulk_channel.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::rpc {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<BulkListener> Listen() {
  auto l = BulkListener::Start("127.0.0.1", 0);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *std::move(l) : nullptr;
}

// A plain connection to the listener that sends `bytes` and nothing else.
int ConnectRaw(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (!bytes.empty()) {
    EXPECT_TRUE(SendAll(fd, {{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}}).ok());
  }
  return fd;
}

// Waits (bounded) until the listener has refused `n` connections.
bool RefusedReaches(const BulkListener& l, int64_t n) {
  for (int i = 0; i < 10000 && l.refused() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return l.refused() >= n;
}

TEST(BulkChannelTest, AConnectionPresentingItsKeyIsHandedToItsSessionOnce) {
  auto l = Listen();
  ASSERT_NE(l, nullptr);
  EXPECT_GT(l->port(), 0);
  const std::string key = l->Expect();
  ASSERT_EQ(key.size(), kBulkKeyBytes);
  EXPECT_NE(key, l->Expect());  // each session its own
  auto trainer = ConnectBulk("127.0.0.1", l->port(), key);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const int worker = l->TakeWithin(key, 10);
  ASSERT_GE(worker, 0);
  EXPECT_EQ(l->Take(key), -1);  // once
  // Pieces of several sizes, one large enough to need many writes, arrive whole and in order.
  std::vector<std::string> parts = {"chunk-", std::string(3 << 20, 'x'), "", "end"};
  for (size_t i = 0; i < parts[1].size(); i += 4093) parts[1][i] = static_cast<char>(i);
  std::vector<BulkPiece> pieces;
  std::string want;
  for (const std::string& p : parts) {
    pieces.push_back({reinterpret_cast<const uint8_t*>(p.data()), p.size()});
    want += p;
  }
  std::thread sender([&] { EXPECT_TRUE(SendAll(worker, pieces).ok()); });
  std::string got(want.size(), '\0');
  EXPECT_TRUE(RecvAll(*trainer, reinterpret_cast<uint8_t*>(got.data()), got.size()).ok());
  sender.join();
  EXPECT_TRUE(got == want);
  EXPECT_EQ(l->refused(), 0);
  close(worker);
  close(*trainer);
}

// A payload whose last part arrives after the reader has taken the first is read whole: the
// kernel wakes a reader only when the bytes queued reach its wake mark (SO_RCVLOWAT), so a
// read that had taken part of a payload and slept for the rest with the mark at a MiB slept
// on with the last quarter MiB queued (a 38 MB batch's last 161 KB sat there until the
// trainer gave the worker up as hung, 10 s later).
TEST(BulkChannelTest, APayloadsLastPartUnderTheWakeMarkIsRead) {
  auto l = Listen();
  ASSERT_NE(l, nullptr);
  const std::string key = l->Expect();
  auto trainer = ConnectBulk("127.0.0.1", l->port(), key);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const int worker = l->TakeWithin(key, 10);
  ASSERT_GE(worker, 0);
  const size_t first = kBulkWakeBytes + kBulkWakeBytes / 4;
  const size_t last = kBulkWakeBytes / 4;
  std::string want(first + last, '\0');
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<char>(i * 7);
  std::string got(want.size(), '\0');
  std::atomic<bool> done{false};
  Status read;
  std::thread reader([&] {
    read = RecvAll(*trainer, reinterpret_cast<uint8_t*>(got.data()), got.size());
    done = true;
  });
  const auto* bytes = reinterpret_cast<const uint8_t*>(want.data());
  ASSERT_TRUE(SendAll(worker, {{bytes, first}}).ok());
  // The first part delivered and at least a MiB of it taken (what the first wake takes):
  // under a quarter MiB is left queued, so the last quarter cannot lift the queue to a MiB.
  for (int i = 0; i < 10000; ++i) {
    int unsent = 0;
    int queued = 0;
    ioctl(worker, SIOCOUTQ, &unsent);
    ioctl(*trainer, FIONREAD, &queued);
    if (unsent == 0 && static_cast<size_t>(queued) <= last) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(SendAll(worker, {{bytes + first, last}}).ok());
  for (int i = 0; i < 20000 && !done; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(done) << "the last " << last << " bytes were never read";
  if (!done) shutdown(*trainer, SHUT_RDWR);  // releases the reader
  reader.join();
  EXPECT_TRUE(read.ok()) << read;
  EXPECT_TRUE(got == want);
  close(worker);
  close(*trainer);
}

TEST(BulkChannelTest, AWrongOrLateHelloIsClosedUnread) {
  auto l = Listen();
  ASSERT_NE(l, nullptr);
  const std::string key = l->Expect();
  // A key no session holds.
  std::string other = key;
  other[0] = static_cast<char>(other[0] ^ 1);
  auto wrong = ConnectBulk("127.0.0.1", l->port(), other);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  ASSERT_TRUE(RefusedReaches(*l, 1));
  uint8_t byte = 0;
  Status s = RecvAll(*wrong, &byte, 1);
  EXPECT_THAT(std::string(s.message()), HasSubstr("closed after 0 of 1 bytes"));
  close(*wrong);
  // Not the magic (an HTTP client, say): closed.
  const int http = ConnectRaw(l->port(), "GET / HTTP/1.1\r\nHost: worker\r\n\r\n0123456789abcdef");
  ASSERT_GE(http, 0);
  // A short hello that then goes away.
  const int short_hello = ConnectRaw(l->port(), "abc");
  close(short_hello);
  ASSERT_TRUE(RefusedReaches(*l, 3));
  close(http);
  // A session that ended: its key is refused.
  l->Forget(key);
  auto late = ConnectBulk("127.0.0.1", l->port(), key);
  ASSERT_TRUE(late.ok());
  ASSERT_TRUE(RefusedReaches(*l, 4));
  EXPECT_EQ(l->TakeWithin(key, 0.05), -1);
  close(*late);
  // The right key still works after all that.
  const std::string again = l->Expect();
  auto right = ConnectBulk("127.0.0.1", l->port(), again);
  ASSERT_TRUE(right.ok());
  const int taken = l->TakeWithin(again, 10);
  EXPECT_GE(taken, 0);
  close(taken);
  close(*right);
}

TEST(BulkChannelTest, APeerGoingAwayIsAnErrorWithTheCountNotASignal) {
  auto l = Listen();
  ASSERT_NE(l, nullptr);
  const std::string key = l->Expect();
  auto trainer = ConnectBulk("127.0.0.1", l->port(), key);
  ASSERT_TRUE(trainer.ok());
  const int worker = l->TakeWithin(key, 10);
  ASSERT_GE(worker, 0);
  const std::string three = "abc";
  ASSERT_TRUE(SendAll(worker, {{reinterpret_cast<const uint8_t*>(three.data()), 3}}).ok());
  close(worker);
  uint8_t buf[10];
  Status s = RecvAll(*trainer, buf, sizeof buf);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("closed after 3 of 10 bytes"));
  close(*trainer);
  // Writing to a peer that closed: an error (a reset, or EPIPE), and this process lives on
  // (no SIGPIPE). More than the sockets' buffers hold, so a write meets the reset.
  const std::string key2 = l->Expect();
  auto gone = ConnectBulk("127.0.0.1", l->port(), key2);
  ASSERT_TRUE(gone.ok());
  const int to_gone = l->TakeWithin(key2, 10);
  ASSERT_GE(to_gone, 0);
  close(*gone);
  const std::string big(64 << 20, 'y');
  Status lost = SendAll(to_gone, {{reinterpret_cast<const uint8_t*>(big.data()), big.size()}});
  EXPECT_FALSE(lost.ok());
  EXPECT_THAT(std::string(lost.message()), HasSubstr("the bulk data channel failed"));
  close(to_gone);
}

TEST(BulkChannelTest, ANothingListeningPortIsAClearConnectError) {
  auto l = Listen();
  ASSERT_NE(l, nullptr);
  const int port = l->port();
  l.reset();  // closed: nothing listens there now
  auto fd = ConnectBulk("127.0.0.1", port, std::string(kBulkKeyBytes, 'k'), 1);
  ASSERT_FALSE(fd.ok());
  EXPECT_THAT(std::string(fd.status().message()),
              HasSubstr("bulk data channel to 127.0.0.1:" + std::to_string(port)));
}

TEST(BulkChannelTest, HostOfAddress) {
  EXPECT_EQ(HostOfAddress("10.0.0.2:7070"), "10.0.0.2");
  EXPECT_EQ(HostOfAddress("worker-3.pool:7070"), "worker-3.pool");
  EXPECT_EQ(HostOfAddress("[::1]:7070"), "::1");
  EXPECT_EQ(HostOfAddress("::1:7070"), std::nullopt);
  EXPECT_EQ(HostOfAddress("unix:/run/sluice.sock"), std::nullopt);
  EXPECT_EQ(HostOfAddress("dns:///pool:7070"), std::nullopt);
  EXPECT_EQ(HostOfAddress("ipv4:10.0.0.2:7070"), std::nullopt);
  EXPECT_EQ(HostOfAddress("noport"), std::nullopt);
  EXPECT_EQ(HostOfAddress("host:"), std::nullopt);
  EXPECT_EQ(HostOfAddress(""), std::nullopt);
}

TEST(BulkChannelTest, AnAddressThatCannotBeBoundSaysWhich) {
  auto l = BulkListener::Start("192.0.2.1", 0);  // TEST-NET-1: never this machine's
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(std::string(l.status().message()),
              HasSubstr("cannot listen for bulk data on 192.0.2.1:0"));
}

}  // namespace
}  // namespace sluice::rpc
