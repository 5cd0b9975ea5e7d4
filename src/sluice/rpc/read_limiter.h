// ReadLimiter: a token bucket that caps the bytes per second a worker reads from storage
// (`sluice worker --read-limit`), to protect shared storage from a worker fleet, and to
// emulate a slow remote disk. Readers ask for their bytes before they read; the bucket holds
// at most one second's worth, and a request larger than what is there waits (requests are
// served in arrival order, so a large file delays those behind it, as a real disk would).
// Thread-safe.
#ifndef SLUICE_RPC_READ_LIMITER_H_
#define SLUICE_RPC_READ_LIMITER_H_

#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace sluice::rpc {

class ReadLimiter {
 public:
  // REQUIRES: bytes_per_s > 0.
  explicit ReadLimiter(double bytes_per_s);

  // Blocks until `bytes` may be read.
  void Acquire(int64_t bytes);

  // The delay, in seconds, a request for `bytes` made at `now_s` has to wait; books it.
  // (Acquire's arithmetic, exposed for tests with a fake clock.)
  double Reserve(int64_t bytes, double now_s);

  double bytes_per_s() const { return rate_; }

 private:
  const double rate_;
  std::mutex mu_;
  // When every byte booked so far has been paid for at the rate. A request books its bytes
  // from max(next_free_s_, now - 1 s) (so at most one second of unused capacity is saved)
  // and may go once next_free_s_ is not in the future.
  double next_free_s_ ABSL_GUARDED_BY(mu_) = -1e300;
};

}  // namespace sluice::rpc

#endif  // SLUICE_RPC_READ_LIMITER_H_
