// The bulk data channel: a plain TCP connection beside a Process stream that carries its
// chunks' payloads, so the trainer reads them from the socket straight into the buffer the
// tensors will view (docs/offload.md, "The bulk data channel").
//
// Everything else stays on the gRPC stream: the chunk's split id and header (with
// Chunk.bulk_bytes, the payload's size, in place of the payload), SplitDone, credit, errors,
// draining. The worker writes a chunk's message on the stream and then its payload on the
// channel, one chunk at a time, so the trainer, reading a chunk's message, knows the next
// bulk_bytes bytes on the channel are its payload. The exactly-once accounting is the
// stream's, unchanged: a chunk counts once its payload is read whole.
//
// On one machine the payloads need not cross a socket at all: a worker also listens on a
// Unix socket in the abstract namespace (which is its network namespace's: a trainer in
// another one, or on another host, cannot reach it), and a trainer that reaches it hands
// over a sealed shared-memory ring with its hello. The worker then copies each payload into
// the ring and sends only counts on the socket ("so many bytes written"), and the trainer
// copies them out and answers with counts of its own ("so many bytes free again"): one copy
// on each side, in user space, and no TCP (docs/offload.md, "The bulk data channel").
//
// Authentication: a worker offers the channel in its Opened reply (Opened.bulk_port and a
// 32-byte random key, drawn for that session) on the stream that its token (and TLS) already
// authenticated; the trainer's first bytes on the new connection are kBulkMagic and that
// key, and the worker hands the connection to the session that holds the key, once. Anything
// else is closed unread. The payload bytes themselves are not encrypted: a worker serving TLS
// does not offer the channel, and a trainer connecting with TLS does not ask for it (its
// chunks stay on the encrypted stream).
#ifndef SLUICE_RPC_BULK_CHANNEL_H_
#define SLUICE_RPC_BULK_CHANNEL_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sluice/core/copy.h"
#include "sluice/core/status.h"
#include "sluice/rpc/slot_arena.h"

namespace sluice::rpc {

inline constexpr std::string_view kBulkMagic = "SLUICEB1";
inline constexpr size_t kBulkKeyBytes = 32;
// How long the worker waits for a new connection's hello, and the trainer for its connect:
// a round trip on any link the planner would offload over, with room for a loaded machine.
inline constexpr double kBulkHelloTimeoutS = 2.0;
// RecvAll asks the kernel to wake it once this much of a payload has arrived (SO_RCVLOWAT):
// a wake-up (a few microseconds of scheduler and futex) per MiB is under a tenth of what
// copying that MiB out of the socket costs, where one per segment had cost more than the
// copy; and the kernel grows the socket's buffer to twice this, which the default TCP
// limits (tcp_rmem, 6 MiB) allow.
inline constexpr size_t kBulkWakeBytes = 1 << 20;

// The local hello: kBulkRingMagic, the key, and the ring's size (8 bytes, little-endian),
// with the ring's memfd attached.
inline constexpr std::string_view kBulkRingMagic = "SLUICER1";
// The same with shared slots (rpc/slot_arena.h): then 16 more bytes, the arena's layout
// (u32 regions, u32 slots, u64 slot bytes, little-endian), and the arena's memfd after the
// ring's.
inline constexpr std::string_view kBulkRingSlotsMagic = "SLUICER2";
// The shared-memory ring's size: what the TCP channel lets a worker run ahead of its
// trainer (the receive buffer, twice kBulkWakeBytes, and the default largest send buffer,
// 4 MiB) rounded up to a power of two, so a worker writes as far ahead as on a socket.
inline constexpr size_t kBulkRingBytes = 8 << 20;
// The sizes a worker accepts in a hello: a ring holds at least one 64 KiB write, and a
// trainer cannot make a worker map more than this.
inline constexpr size_t kBulkRingMinBytes = 64 << 10;
inline constexpr size_t kBulkRingMaxBytes = 64 << 20;

struct BulkPiece {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// One end of a bulk data channel, owned by its session: a TCP connection whose bytes are
// the payloads, or a local connection whose payloads go through a shared-memory ring.
// Send and Recv are called by one thread each (the worker's handler, the trainer's reader);
// Shutdown from any thread.
class BulkConnection {
 public:
  // A TCP connection (owns `fd`).
  explicit BulkConnection(int fd) : fd_(fd) {}
  // A local connection (owns `fd` and the mapping `ring` of `ring_bytes`); `sender`: the
  // worker's end, which writes into the ring.
  BulkConnection(int fd, uint8_t* ring, size_t ring_bytes, bool sender);
  ~BulkConnection();
  BulkConnection(const BulkConnection&) = delete;
  BulkConnection& operator=(const BulkConnection&) = delete;

  int fd() const { return fd_; }
  bool shared_memory() const { return ring_ != nullptr; }
  // Shared slots that came with a local connection: the worker's mapping of them (its end)
  // or the trainer's arena (its end); null where there are none.
  const std::shared_ptr<SlotArenaWriter>& slot_writer() const { return slot_writer_; }
  void set_slot_writer(std::shared_ptr<SlotArenaWriter> w) { slot_writer_ = std::move(w); }
  const std::shared_ptr<SlotArena>& slot_arena() const { return slot_arena_; }
  void set_slot_arena(std::shared_ptr<SlotArena> a) { slot_arena_ = std::move(a); }
  // Writes every byte of `pieces`. An error says the peer went away and why.
  Status Send(const std::vector<BulkPiece>& pieces);
  // Reads exactly `n` bytes into `out`. An error says the channel closed, or why it failed,
  // or (a ring) that the peer's counts broke the ring's bounds. `read_later`: `out` is read
  // only once a larger unit is whole (a batch's slot, a whole batch); a ring then copies it
  // past the cache or not as its copies' times say (core/copy.h, CopyWayChooser; on TCP the
  // kernel does the copy, as it does). `more`: the next Recv reads on in the same
  // payload at once, so a ring does not count the room back to the worker at the end of this
  // one (it still does before it waits, and at the end of a Recv without `more`): a payload
  // read in parts, tensor by tensor into slots, costs one count back, not one per part.
  Status Recv(uint8_t* out, size_t n, bool read_later = false, bool more = false);
  // Ends a payload read with `more`: counts the room back (a ring; nothing on TCP).
  void EndPayload();
  // Counts sent to the peer on a ring (the trainer's: room given back), for tests.
  int64_t counts_sent() const { return counts_sent_; }
  // How a ring's receiver copies what is read later, for tests.
  const CopyWayChooser& landing() const { return landing_; }
  // A Send or Recv blocked on the peer returns with an error.
  void Shutdown();

 private:
  Status RingSend(const std::vector<BulkPiece>& pieces);
  Status RingRecv(uint8_t* out, size_t n, bool read_later, bool more);
  // Adds the counts the peer sent to `*sum`: those already queued, or (`wait`) at least one.
  Status ReadCounts(bool wait, uint64_t* sum);
  Status SendCount(uint64_t n);
  // The receiver's bytes read and not yet counted back, counted back now (none: nothing sent).
  Status CountBackRead();

  int fd_ = -1;
  uint8_t* ring_ = nullptr;
  size_t ring_bytes_ = 0;
  size_t pos_ = 0;           // the next byte to write (sender) or to read (receiver)
  uint64_t room_ = 0;        // sender: bytes free to write; receiver: bytes written, unread
  uint64_t unreported_ = 0;  // receiver: bytes read and not yet counted back to the worker
  int64_t counts_sent_ = 0;
  uint8_t partial_[8] = {};  // the start of a count split between two reads
  size_t partial_size_ = 0;
  CopyWayChooser landing_;  // receiver: the copies of what is read later
  std::shared_ptr<SlotArenaWriter> slot_writer_;
  std::shared_ptr<SlotArena> slot_arena_;
};

// The worker's side: listens for bulk connections and hands each to the session whose key
// it presents.
class BulkListener {
 public:
  // Listens on `host` ("" or "0.0.0.0": every IPv4 address; "::": every address) at `port`
  // (0: a free one); with `shared_memory`, also on a Unix socket of a random name in the
  // abstract namespace for local connections. Error: "cannot listen for bulk data on
  // HOST:PORT: why" (a local socket that cannot be made is left out, not an error).
  // With `shared_slots` too, a local connection's shared slots are mapped (rpc/slot_arena.h;
  // else left out, and the ring carries every byte).
  static StatusOr<std::unique_ptr<BulkListener>> Start(const std::string& host, int port,
                                                       bool shared_memory = false,
                                                       bool shared_slots = true);
  ~BulkListener();  // stops accepting; closes every connection no session took

  int port() const { return port_; }
  // The local socket's name in the abstract namespace (without its leading zero byte);
  // empty when there is none.
  const std::string& local_name() const { return local_name_; }

  // A new session's key: the connection that presents it is kept for Take.
  std::string Expect();
  // The connection that presented `key`, once; null when none has yet.
  std::unique_ptr<BulkConnection> Take(const std::string& key);
  // The same, waiting up to `timeout_s` for it.
  std::unique_ptr<BulkConnection> TakeWithin(const std::string& key, double timeout_s);
  // The shared slots of the connection that presented `key` (rpc/slot_arena.h), waiting up
  // to `timeout_s` for it to arrive, without taking it; null when it has none, or has not
  // arrived, or was taken.
  std::shared_ptr<SlotArenaWriter> SlotsWithin(const std::string& key, double timeout_s);
  // The session ended: its key is refused from now on, and a connection not taken is closed.
  void Forget(const std::string& key);
  // Connections closed because their hello was wrong, late or for no expected key.
  int64_t refused() const { return refused_.load(); }

 private:
  BulkListener() = default;
  void AcceptLoop();
  // Reads `n` hello bytes from `fd` within the hello's time; with `fds`, takes the
  // descriptors that came with them (the caller closes them).
  bool ReadHello(int fd, char* out, size_t n, std::vector<int>* fds);
  void Admit(int fd);
  void AdmitLocal(int fd);
  void Keep(const std::string& key, std::unique_ptr<BulkConnection> c);
  // Waits (holding `lock` on mu_) up to `timeout_s` for the connection that presents `key`:
  // it, still kept here; null when it has not arrived, or was taken or forgotten.
  BulkConnection* ArrivedWithin(std::unique_lock<std::mutex>& lock, const std::string& key,
                                double timeout_s);

  int listen_fd_ = -1;
  int local_fd_ = -1;  // the abstract Unix socket; -1: none
  int wake_fd_ = -1;   // eventfd: Stop
  int port_ = 0;
  bool shared_slots_ = true;
  std::string local_name_;
  std::thread acceptor_;
  std::atomic<int64_t> refused_{0};
  std::mutex mu_;
  std::condition_variable arrived_;  // a connection was kept
  // key -> its connection (null: not arrived yet)
  std::map<std::string, std::unique_ptr<BulkConnection>> expected_;
};

// The trainer's side: connects to host:port and presents `key`. The returned descriptor
// belongs to the caller.
StatusOr<int> ConnectBulk(const std::string& host, int port, std::string_view key,
                          double timeout_s = kBulkHelloTimeoutS);
// The trainer's side on the worker's machine: connects to the abstract Unix socket `name`
// and presents `key` with a new ring of `ring_bytes`, and with `slots` (shared slots for the
// samples' largest tensor, rpc/slot_arena.h) when given; the connection then holds them
// (slot_arena()). Fails (and the caller connects over TCP) where that socket is not in this
// network namespace.
StatusOr<std::unique_ptr<BulkConnection>> ConnectBulkLocal(
    const std::string& name, std::string_view key, size_t ring_bytes = kBulkRingBytes,
    std::shared_ptr<SlotArena> slots = nullptr);

// The host of a "host:port" or "[v6]:port" address; nullopt for anything else (a gRPC
// target such as "unix:/path" or "dns:///name:port"), where no bulk channel is tried.
std::optional<std::string> HostOfAddress(const std::string& address);

// One sendmsg of `bytes` on a Unix socket with the descriptors `attached` (at most two;
// none when empty), retried on EINTR; what sendmsg returned (errno set when negative).
ssize_t SendWithDescriptors(int socket_fd, std::string_view bytes,
                            const std::vector<int>& attached);
// Writes every byte of `pieces` (no SIGPIPE). An error says the peer went away and why.
Status SendAll(int fd, const std::vector<BulkPiece>& pieces);
// Reads exactly `n` bytes into `out`. An error says the channel closed, or why it failed.
Status RecvAll(int fd, uint8_t* out, size_t n);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_BULK_CHANNEL_H_
