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
// Authentication: a worker offers the channel in its Opened reply (Opened.bulk_port and a
// 32-byte random key, drawn for that session) on the stream that its token (and TLS) already
// authenticated; the trainer's first bytes on the new connection are kBulkMagic and that
// key, and the worker hands the connection to the session that holds the key, once. Anything
// else is closed unread. The payload bytes themselves are not encrypted: a worker serving TLS
// does not offer the channel, and a trainer connecting with TLS does not ask for it (its
// chunks stay on the encrypted stream).
#ifndef SLUICE_RPC_BULK_CHANNEL_H_
#define SLUICE_RPC_BULK_CHANNEL_H_

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

#include "sluice/core/status.h"

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

// The worker's side: listens for bulk connections and hands each to the session whose key
// it presents.
class BulkListener {
 public:
  // Listens on `host` ("" or "0.0.0.0": every IPv4 address; "::": every address) at `port`
  // (0: a free one). Error: "cannot listen for bulk data on HOST:PORT: why".
  static StatusOr<std::unique_ptr<BulkListener>> Start(const std::string& host, int port);
  ~BulkListener();  // stops accepting; closes every connection no session took

  int port() const { return port_; }

  // A new session's key: the connection that presents it is kept for Take.
  std::string Expect();
  // The connection that presented `key` (the caller owns it), once; -1 when none has yet.
  int Take(const std::string& key);
  // The same, waiting up to `timeout_s` for it.
  int TakeWithin(const std::string& key, double timeout_s);
  // The session ended: its key is refused from now on, and a connection not taken is closed.
  void Forget(const std::string& key);
  // Connections closed because their hello was wrong, late or for no expected key.
  int64_t refused() const { return refused_.load(); }

 private:
  BulkListener() = default;
  void AcceptLoop();
  void Admit(int fd);

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<int64_t> refused_{0};
  std::mutex mu_;
  std::condition_variable arrived_;      // a connection was kept
  std::map<std::string, int> expected_;  // key -> connection (-1: not arrived)
};

// The trainer's side: connects to host:port and presents `key`. The returned descriptor
// belongs to the caller.
StatusOr<int> ConnectBulk(const std::string& host, int port, std::string_view key,
                          double timeout_s = kBulkHelloTimeoutS);

// The host of a "host:port" or "[v6]:port" address; nullopt for anything else (a gRPC
// target such as "unix:/path" or "dns:///name:port"), where no bulk channel is tried.
std::optional<std::string> HostOfAddress(const std::string& address);

struct BulkPiece {
  const uint8_t* data = nullptr;
  size_t size = 0;
};
// Writes every byte of `pieces` (no SIGPIPE). An error says the peer went away and why.
Status SendAll(int fd, const std::vector<BulkPiece>& pieces);
// Reads exactly `n` bytes into `out`. An error says the channel closed, or why it failed.
Status RecvAll(int fd, uint8_t* out, size_t n);

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_BULK_CHANNEL_H_
