#include "sluice/rpc/read_limiter.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace sluice::rpc {

ReadLimiter::ReadLimiter(double bytes_per_s) : rate_(bytes_per_s) {}

double ReadLimiter::Reserve(int64_t bytes, double now_s) {
  std::lock_guard<std::mutex> lock(mu_);
  // Up to one second of unused capacity may be saved up (the bucket's depth).
  const double start = std::max(next_free_s_, now_s - 1.0);
  next_free_s_ = start + static_cast<double>(std::max<int64_t>(bytes, 0)) / rate_;
  return std::max(0.0, next_free_s_ - now_s);
}

void ReadLimiter::Acquire(int64_t bytes) {
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const double wait = Reserve(bytes, now);
  if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
}

}  // namespace sluice::rpc
