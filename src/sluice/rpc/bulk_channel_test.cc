// The bulk data channel's sockets on loopback: a connection is handed to the session whose
// key it presents, once; anything else is closed unread; bytes arrive whole and in order;
// a peer that goes away is an error with the count, never a signal.
#include "sluice/rpc/bulk_channel.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
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
  std::unique_ptr<BulkConnection> worker_end = l->TakeWithin(key, 10);
  ASSERT_NE(worker_end, nullptr);
  const int worker = worker_end->fd();
  EXPECT_EQ(l->Take(key), nullptr);  // once
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
  std::unique_ptr<BulkConnection> worker_end = l->TakeWithin(key, 10);
  ASSERT_NE(worker_end, nullptr);
  const int worker = worker_end->fd();
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
  // The first part delivered and the first wake's read done: what is left queued with the
  // last quarter added stays under a MiB, so the last part cannot lift the queue to the mark.
  // (The first read takes what had arrived when it woke, a MiB or a little less, so a few
  // hundred bytes over a quarter MiB may stay queued.)
  bool set_up = false;
  for (int i = 0; i < 10000 && !set_up; ++i) {
    int unsent = 0;
    int queued = 0;
    ioctl(worker, SIOCOUTQ, &unsent);
    ioctl(*trainer, FIONREAD, &queued);
    set_up = unsent == 0 && static_cast<size_t>(queued) < first &&
             static_cast<size_t>(queued) + last < kBulkWakeBytes;
    if (!set_up) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!set_up) {
    shutdown(*trainer, SHUT_RDWR);  // releases the reader
    reader.join();
    close(*trainer);
    FAIL() << "the first part was never delivered and read in part";
  }
  ASSERT_TRUE(SendAll(worker, {{bytes + first, last}}).ok());
  for (int i = 0; i < 20000 && !done; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(done) << "the last " << last << " bytes were never read";
  if (!done) shutdown(*trainer, SHUT_RDWR);  // releases the reader
  reader.join();
  EXPECT_TRUE(read.ok()) << read;
  EXPECT_TRUE(got == want);
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
  EXPECT_EQ(l->TakeWithin(key, 0.05), nullptr);
  close(*late);
  // The right key still works after all that.
  const std::string again = l->Expect();
  auto right = ConnectBulk("127.0.0.1", l->port(), again);
  ASSERT_TRUE(right.ok());
  EXPECT_NE(l->TakeWithin(again, 10), nullptr);
  close(*right);
}

TEST(BulkChannelTest, APeerGoingAwayIsAnErrorWithTheCountNotASignal) {
  auto l = Listen();
  ASSERT_NE(l, nullptr);
  const std::string key = l->Expect();
  auto trainer = ConnectBulk("127.0.0.1", l->port(), key);
  ASSERT_TRUE(trainer.ok());
  std::unique_ptr<BulkConnection> worker_end = l->TakeWithin(key, 10);
  ASSERT_NE(worker_end, nullptr);
  const int worker = worker_end->fd();
  const std::string three = "abc";
  ASSERT_TRUE(SendAll(worker, {{reinterpret_cast<const uint8_t*>(three.data()), 3}}).ok());
  worker_end.reset();  // closes it
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
  std::unique_ptr<BulkConnection> to_gone_end = l->TakeWithin(key2, 10);
  ASSERT_NE(to_gone_end, nullptr);
  const int to_gone = to_gone_end->fd();
  close(*gone);
  const std::string big(64 << 20, 'y');
  Status lost = SendAll(to_gone, {{reinterpret_cast<const uint8_t*>(big.data()), big.size()}});
  EXPECT_FALSE(lost.ok());
  EXPECT_THAT(std::string(lost.message()), HasSubstr("the bulk data channel failed"));
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

std::unique_ptr<BulkListener> ListenWithRing() {
  auto l = BulkListener::Start("127.0.0.1", 0, /*shared_memory=*/true);
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok()) return nullptr;
  EXPECT_FALSE((*l)->local_name().empty());
  return *std::move(l);
}

// The trainer's and the worker's ends of a local connection with a ring of `ring_bytes`.
struct RingPair {
  std::unique_ptr<BulkConnection> trainer;
  std::unique_ptr<BulkConnection> worker;
};
RingPair ConnectRing(BulkListener& l, size_t ring_bytes) {
  RingPair p;
  const std::string key = l.Expect();
  auto trainer = ConnectBulkLocal(l.local_name(), key, ring_bytes);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return p;
  p.trainer = *std::move(trainer);
  p.worker = l.TakeWithin(key, 10);
  EXPECT_NE(p.worker, nullptr);
  return p;
}

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 31 + seed * 7 + (i >> 9));
  return s;
}

// Payloads many times the ring's size, of odd sizes (so every one wraps somewhere new), in
// several pieces each, arrive whole and in order: the worker waits for room, the trainer for
// bytes, and neither waits for the other forever.
TEST(BulkChannelTest, ALocalConnectionCarriesPayloadsThroughASharedRing) {
  auto l = ListenWithRing();
  ASSERT_NE(l, nullptr);
  RingPair p = ConnectRing(*l, kBulkRingMinBytes);
  ASSERT_NE(p.trainer, nullptr);
  ASSERT_NE(p.worker, nullptr);
  EXPECT_TRUE(p.trainer->shared_memory());
  EXPECT_TRUE(p.worker->shared_memory());
  std::vector<std::string> payloads;
  for (size_t n : {size_t{1}, size_t{5}, kBulkRingMinBytes - 3, kBulkRingMinBytes,
                   kBulkRingMinBytes + 17, size_t{3} << 20, size_t{0} + 12345, size_t{1} << 20}) {
    payloads.push_back(Pattern(n, static_cast<int>(payloads.size())));
  }
  std::thread sender([&] {
    for (const std::string& want : payloads) {
      // Three pieces: a header-sized one, the middle, the rest.
      const auto* b = reinterpret_cast<const uint8_t*>(want.data());
      const size_t a = std::min<size_t>(want.size(), 7);
      const size_t m = (want.size() - a) / 2;
      EXPECT_TRUE(p.worker->Send({{b, a}, {b + a, m}, {b + a + m, want.size() - a - m}}).ok());
    }
  });
  // Every other payload read later (copied the way core/copy.h's chooser says), into
  // destinations at every offset from a 16-byte boundary a copy past the cache handles
  // differently: the same bytes either way.
  for (size_t i = 0; i < payloads.size(); ++i) {
    const std::string& want = payloads[i];
    const size_t offset = i % 4 * 5;  // 0, 5, 10, 15
    std::string buf(want.size() + offset, '\0');
    const bool read_later = i % 2 == 1;
    const Status s =
        p.trainer->Recv(reinterpret_cast<uint8_t*>(buf.data()) + offset, want.size(), read_later);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(buf.substr(offset) == want)
        << "a payload of " << want.size() << " bytes differs (read later: " << read_later
        << ")";
  }
  sender.join();
  EXPECT_EQ(l->refused(), 0);
}

// Payloads read later go through the receiver's chooser (core/copy.h): its first trial
// copies half of them past the cache and half with memcpy, then settles on one way, and
// every payload arrives whole either way.
TEST(BulkChannelTest, ARingsLaterReadsTryBothWaysOfCopyingAndKeepTheirBytes) {
  auto l = ListenWithRing();
  ASSERT_NE(l, nullptr);
  RingPair p = ConnectRing(*l, kBulkRingMinBytes * 4);
  ASSERT_NE(p.trainer, nullptr);
  constexpr int kPayloads = 2 * CopyWayChooser::kTrialCopies + 3;
  constexpr size_t kSize = CopyWayChooser::kMinTimedBytes + 4096;
  std::vector<std::string> payloads;
  for (int i = 0; i < kPayloads; ++i) payloads.push_back(Pattern(kSize, i));
  std::thread sender([&] {
    for (const std::string& want : payloads) {
      EXPECT_TRUE(p.worker->Send({{reinterpret_cast<const uint8_t*>(want.data()), want.size()}})
                      .ok());
    }
  });
  for (int i = 0; i < kPayloads; ++i) {
    std::string buf(kSize, '\0');
    const Status s = p.trainer->Recv(reinterpret_cast<uint8_t*>(buf.data()), kSize,
                                     /*read_later=*/true);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(buf == payloads[i]) << "payload " << i << " differs";
  }
  sender.join();
  // One timed copy a payload (however the ring's wrap and the worker's pace split it):
  // one whole trial of 2 x 16, and the next not yet begun.
  EXPECT_EQ(p.trainer->landing().trials(), 1);
}

// A payload read in parts (tensor by tensor into the batch's slots) gives its room back to
// the worker once, after its last part, not once per part; without `more` every Recv counts
// back. The bytes are the same either way, and the room comes back whole: the worker can
// write a payload that needs all of the ring's room again.
TEST(BulkChannelTest, APayloadReadInPartsCountsItsRoomBackOnce) {
  auto l = ListenWithRing();
  ASSERT_NE(l, nullptr);
  RingPair p = ConnectRing(*l, kBulkRingMinBytes);
  ASSERT_NE(p.trainer, nullptr);
  ASSERT_NE(p.worker, nullptr);
  constexpr size_t kParts = 8;
  constexpr size_t kPart = kBulkRingMinBytes / kParts;
  const std::string want = Pattern(kBulkRingMinBytes, 3);  // as large as the ring
  const auto* b = reinterpret_cast<const uint8_t*>(want.data());
  // Each payload is sent once the last is read whole, so it finds the ring empty and is
  // written and counted at once: what the trainer counts back is then its own doing.
  std::promise<void> read[3];
  std::thread sender([&] {
    for (int i = 0; i < 3; ++i) {
      if (i > 0) read[i - 1].get_future().wait();
      EXPECT_TRUE(p.worker->Send({{b, want.size()}}).ok());
    }
  });
  int i = 0;
  for (bool more : {true, false, true}) {
    const int64_t before = p.trainer->counts_sent();
    std::string buf(want.size(), '\0');
    for (size_t part = 0; part < kParts; ++part) {
      const Status s = p.trainer->Recv(reinterpret_cast<uint8_t*>(buf.data()) + part * kPart,
                                       kPart, /*read_later=*/false, more);
      ASSERT_TRUE(s.ok()) << s;
    }
    if (more) p.trainer->EndPayload();
    EXPECT_TRUE(buf == want) << "more=" << more;
    // One count back per part read without `more`; with it one for the payload (the first
    // part waits for the worker's count with nothing read yet, so nothing to count then).
    EXPECT_EQ(p.trainer->counts_sent() - before, more ? 1 : static_cast<int64_t>(kParts))
        << "more=" << more;
    read[i++].set_value();
  }
  sender.join();
}

// A raw local connection that sends `hello` with `fds` attached.
int SendLocalHello(const std::string& name, const std::string& hello, const std::vector<int>& fds) {
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&a),
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size())),
            0);
  EXPECT_EQ(SendWithDescriptors(s, hello, fds), static_cast<ssize_t>(hello.size()));
  return s;
}

std::string LocalHello(const std::string& key, uint64_t size) {
  std::string h(kBulkRingMagic);
  h += key;
  h.append(reinterpret_cast<const char*>(&size), sizeof size);
  return h;
}

// A memfd of `size` bytes, sealed against shrinking when `sealed`.
int Memfd(size_t size, bool sealed) {
  const int fd = memfd_create("test-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  if (sealed) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  }
  return fd;
}

// A worker maps only what cannot hurt it: a ring for a key a session holds, a memfd its
// sender can no longer shrink (a shrunk mapping would fault on the worker's writes), of the
// size announced and within bounds. Everything else is closed unmapped.
TEST(BulkChannelTest, ALocalHelloWithoutASealedRingOfItsSizeIsRefused) {
  auto l = ListenWithRing();
  ASSERT_NE(l, nullptr);
  const std::string key = l->Expect();
  std::string other = key;
  other[3] = static_cast<char>(other[3] ^ 1);
  std::vector<int> open_fds;
  int64_t refused = 0;
  const auto refuse = [&](const std::string& hello, int fd, const char* what) {
    open_fds.push_back(
        SendLocalHello(l->local_name(), hello, fd >= 0 ? std::vector<int>{fd} : std::vector<int>{}));
    if (fd >= 0) close(fd);
    EXPECT_TRUE(RefusedReaches(*l, ++refused)) << what;
    EXPECT_EQ(l->Take(key), nullptr) << what;
  };
  refuse(LocalHello(key, kBulkRingMinBytes), -1, "no ring");
  refuse(LocalHello(key, kBulkRingMinBytes), Memfd(kBulkRingMinBytes, false), "not sealed");
  refuse(LocalHello(key, 2 * kBulkRingMinBytes), Memfd(kBulkRingMinBytes, true), "wrong size");
  refuse(LocalHello(key, kBulkRingMaxBytes * 2), Memfd(kBulkRingMaxBytes * 2, true), "too big");
  refuse(LocalHello(key, 16), Memfd(16, true), "too small");
  refuse(LocalHello(other, kBulkRingMinBytes), Memfd(kBulkRingMinBytes, true), "wrong key");
  std::string tcp_hello(kBulkMagic);
  tcp_hello += key;
  tcp_hello += "12345678";
  refuse(tcp_hello, Memfd(kBulkRingMinBytes, true), "the TCP magic");
  // A descriptor that is not a file at all (a pipe).
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  close(pipe_fds[1]);
  refuse(LocalHello(key, kBulkRingMinBytes), pipe_fds[0], "a pipe");
  for (int fd : open_fds) close(fd);
  // The right hello still works after all that, for the key refused along the way.
  auto right = ConnectBulkLocal(l->local_name(), key, kBulkRingMinBytes);
  ASSERT_TRUE(right.ok()) << right.status();
  auto worker = l->TakeWithin(key, 10);
  ASSERT_NE(worker, nullptr);
  EXPECT_TRUE(worker->shared_memory());
}

// Shared slots come with the ring's hello (rpc/slot_arena.h): a worker maps them when they
// are a sealed memfd of the layout's size and within bounds, and keeps the ring without them
// otherwise (the ring then carries every byte); a worker started without shared slots never
// maps them. SlotsWithin gives them before the connection is taken.
TEST(BulkChannelTest, SharedSlotsComeWithTheRingOrAreLeftOut) {
  SlotArenaLayout layout;
  layout.regions = 2;
  layout.slots = 4;
  layout.slot_bytes = 256;
  // A raw hello with the slots' layout and the two descriptors.
  const auto hello_with_slots = [](const std::string& key, const SlotArenaLayout& l) {
    std::string h(kBulkRingSlotsMagic);
    h += key;
    const uint64_t ring = kBulkRingMinBytes;
    h.append(reinterpret_cast<const char*>(&ring), sizeof ring);
    h.append(reinterpret_cast<const char*>(&l.regions), 4);
    h.append(reinterpret_cast<const char*>(&l.slots), 4);
    h.append(reinterpret_cast<const char*>(&l.slot_bytes), 8);
    return h;
  };
  const auto send = [&](const std::string& name, const std::string& hello, int slots_fd) {
    const int ring = Memfd(kBulkRingMinBytes, true);
    const int s = SendLocalHello(name, hello, {ring, slots_fd});
    close(ring);
    close(slots_fd);
    return s;
  };
  auto l = ListenWithRing();
  ASSERT_NE(l, nullptr);
  struct Case {
    const char* what;
    SlotArenaLayout announced;
    size_t size;
    bool sealed;
    bool mapped;
  };
  SlotArenaLayout too_many = layout;
  too_many.regions = kSlotArenaMaxRegions + 1;
  for (const Case& c : {Case{"right", layout, layout.total_bytes(), true, true},
                        Case{"not sealed", layout, layout.total_bytes(), false, false},
                        Case{"smaller than announced", layout, layout.total_bytes() / 2, true, false},
                        Case{"too many regions", too_many, too_many.total_bytes(), true, false}}) {
    const std::string key = l->Expect();
    const int s = send(l->local_name(), hello_with_slots(key, c.announced), Memfd(c.size, c.sealed));
    std::shared_ptr<SlotArenaWriter> slots = l->SlotsWithin(key, 10);
    auto conn = l->TakeWithin(key, 10);
    ASSERT_NE(conn, nullptr) << c.what << ": the ring is kept either way";
    EXPECT_TRUE(conn->shared_memory()) << c.what;
    EXPECT_EQ(slots != nullptr, c.mapped) << c.what;
    EXPECT_EQ(conn->slot_writer() != nullptr, c.mapped) << c.what;
    close(s);
  }
  // A worker started without shared slots keeps the ring and leaves the slots out.
  auto off = BulkListener::Start("127.0.0.1", 0, /*shared_memory=*/true, /*shared_slots=*/false);
  ASSERT_TRUE(off.ok()) << off.status();
  const std::string key = (*off)->Expect();
  const int s = send((*off)->local_name(), hello_with_slots(key, layout),
                     Memfd(layout.total_bytes(), true));
  auto conn = (*off)->TakeWithin(key, 10);
  ASSERT_NE(conn, nullptr);
  EXPECT_EQ(conn->slot_writer(), nullptr);
  close(s);
  // And the trainer's side: ConnectBulkLocal with an arena hands it over and keeps it.
  auto arena = SlotArena::Create(layout);
  ASSERT_TRUE(arena.ok()) << arena.status();
  const std::string k2 = l->Expect();
  auto trainer = ConnectBulkLocal(l->local_name(), k2, kBulkRingMinBytes, *arena);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->slot_arena(), *arena);
  EXPECT_EQ((*arena)->fd(), -1) << "the trainer's descriptor is closed once handed over";
  auto worker = l->TakeWithin(k2, 10);
  ASSERT_NE(worker, nullptr);
  ASSERT_NE(worker->slot_writer(), nullptr);
  EXPECT_EQ(worker->slot_writer()->layout().total_bytes(), layout.total_bytes());
}

// The trainer's end sees a worker that goes away as a closed channel with the count; a
// worker counting more into the ring than it holds is bad data, not a read past the ring;
// Shutdown releases a read that waits; the worker's end sees a trainer that went away.
TEST(BulkChannelTest, ARingPeerGoingAwayOrMiscountingIsAnErrorWithTheCount) {
  auto l = ListenWithRing();
  ASSERT_NE(l, nullptr);
  {
    RingPair p = ConnectRing(*l, kBulkRingMinBytes);
    ASSERT_NE(p.worker, nullptr);
    const std::string three = "abc";
    ASSERT_TRUE(p.worker->Send({{reinterpret_cast<const uint8_t*>(three.data()), 3}}).ok());
    p.worker.reset();
    uint8_t buf[10];
    const Status s = p.trainer->Recv(buf, sizeof buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(s.message()), HasSubstr("closed after 3 of 10 bytes"));
  }
  {
    RingPair p = ConnectRing(*l, kBulkRingMinBytes);
    ASSERT_NE(p.worker, nullptr);
    const uint64_t lie = kBulkRingMinBytes + 1;
    ASSERT_EQ(send(p.worker->fd(), &lie, sizeof lie, MSG_NOSIGNAL), 8);
    uint8_t buf[16];
    const Status s = p.trainer->Recv(buf, sizeof buf);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("on a shared ring of 65536"));
  }
  {
    RingPair p = ConnectRing(*l, kBulkRingMinBytes);
    ASSERT_NE(p.worker, nullptr);
    Status read;
    std::thread reader([&] {
      uint8_t byte;
      read = p.trainer->Recv(&byte, 1);
    });
    p.trainer->Shutdown();
    reader.join();
    EXPECT_EQ(read.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(read.message()), HasSubstr("after 0 of 1 bytes"));
  }
  {
    RingPair p = ConnectRing(*l, kBulkRingMinBytes);
    ASSERT_NE(p.worker, nullptr);
    p.trainer.reset();
    // More than the ring holds: the worker must wait for room, and meets the closed end.
    const std::string big(4 * kBulkRingMinBytes, 'y');
    const Status lost = p.worker->Send({{reinterpret_cast<const uint8_t*>(big.data()), big.size()}});
    EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(lost.message()), HasSubstr("the bulk data channel"));
  }
}

// The local socket is in the abstract namespace, which belongs to the network namespace: a
// trainer in another one (another machine, or a testbed host) cannot reach it, and takes
// the TCP port instead.
TEST(BulkChannelTest, TheLocalSocketIsOutOfReachFromAnotherNetworkNamespace) {
  auto l = ListenWithRing();
  ASSERT_NE(l, nullptr);
  const std::string key = l->Expect();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNET) != 0) _exit(2);  // not allowed here: nothing to test
    auto c = ConnectBulkLocal(l->local_name(), key, kBulkRingMinBytes);
    _exit(c.ok() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "no permission to make a network namespace";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a trainer in another network namespace reached the ring";
  // From this one it does.
  auto c = ConnectBulkLocal(l->local_name(), key, kBulkRingMinBytes);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(l->TakeWithin(key, 10), nullptr);
}

}  // namespace
}  // namespace sluice::rpc
