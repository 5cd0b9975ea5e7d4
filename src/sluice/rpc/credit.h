// CreditBatcher: when a trainer returns flow-control credit to a worker. A worker sends at
// most its window of bytes that the trainer has not credited (worker_service.h); the trainer
// credits what it has taken off the stream. Returning credit for every chunk cost a message,
// a wake-up of the stream's writer thread and a socket write per chunk (about a sample at
// the element-wise cuts): with the worker's one chunk per sample, 40% of the trainer's CPU
// per offloaded sample (docs/offload.md, "The receive path"). Credit is therefore sent in
// batches:
// - at once when it reaches 1/kWindowFraction of the window: the worker still has the other
//   7/8 to send into, so it is not held back while the trainer keeps taking;
// - otherwise once its oldest byte has waited `hold_ns` (kDefaultHoldNs): a worker blocked on
//   credit waits at most that long, and the writer wakes at most 1/hold_ns times a second
//   however small the chunks are.
// A window under kWindowFraction bytes credits every chunk at once. Not thread-safe: the
// stream calls it under its lock. Times are the caller's (NowNanos in the stream, any clock
// in tests).
#ifndef SLUICE_RPC_CREDIT_H_
#define SLUICE_RPC_CREDIT_H_

#include <cstdint>

namespace sluice::rpc {

class CreditBatcher {
 public:
  static constexpr uint64_t kWindowFraction = 8;
  // 5 ms: a tenth of a 50 ms training step, and under the 10 ms a step varies by on a loaded
  // machine, so a worker waiting that long for credit does not show in the trainer's rate.
  static constexpr int64_t kDefaultHoldNs = 5'000'000;

  explicit CreditBatcher(uint64_t window_bytes = 0, int64_t hold_ns = kDefaultHoldNs)
      : flush_bytes_(window_bytes / kWindowFraction), hold_ns_(hold_ns) {}

  // `bytes` were taken off the stream at `now_ns`.
  void Add(uint64_t bytes, int64_t now_ns) {
    if (pending_ == 0) since_ns_ = now_ns;
    pending_ += bytes;
  }
  // Whether the credit owed should be sent at `now_ns`.
  bool Due(int64_t now_ns) const {
    return pending_ > 0 && (pending_ >= flush_bytes_ || now_ns - since_ns_ >= hold_ns_);
  }
  // Whether it is due because of its size alone (the writer is woken for it at once).
  bool DueBySize() const { return pending_ > 0 && pending_ >= flush_bytes_; }
  // When the credit owed becomes due by time; -1 when nothing is owed.
  int64_t DueAtNs() const { return pending_ > 0 ? since_ns_ + hold_ns_ : -1; }
  uint64_t pending() const { return pending_; }
  // Returns the credit owed and clears it (the caller sends it).
  uint64_t Take() {
    const uint64_t out = pending_;
    pending_ = 0;
    return out;
  }

 private:
  uint64_t flush_bytes_;
  int64_t hold_ns_;
  uint64_t pending_ = 0;
  int64_t since_ns_ = 0;  // when pending_ last became non-zero
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_CREDIT_H_
