// A consumer for the runtime's tests that has no accelerator step, as a training loop that
// always waits for data: the times it gives with each GetNext (ConsumerTimes, as the Python
// loader gives them) say it asked for the next batch at most kStepNs after taking the last.
// Time the test's thread spends between two calls beyond that is the machine's (a loaded
// machine, a sanitizer, two tests at once preempt it), not a step: read as a step, one such
// pause over a window of a few batches had made a stalled loop measure "no stall" (4.8%) and
// plan no offload.
#ifndef SLUICE_RUNTIME_CONSUMER_TEST_UTIL_H_
#define SLUICE_RUNTIME_CONSUMER_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>

#include "sluice/core/clock.h"
#include "sluice/runtime/train.h"

namespace sluice::runtime::test {

class EagerConsumer {
 public:
  // Why 20 us: about what a loop that only keeps each batch takes between two calls, and
  // far under the milliseconds any test pipeline takes to make a batch, so the loop reads as
  // stalled whatever the machine does.
  static constexpr int64_t kStepNs = 20'000;

  // The times to pass with the next GetNext.
  ConsumerTimes Ask() const {
    ConsumerTimes t;
    t.took_previous_ns = took_ns_;
    const int64_t now = NowNanos();
    t.asked_ns = took_ns_ < 0 ? now : std::min(now, took_ns_ + kStepNs);
    return t;
  }
  // Right after each GetNext returns.
  void Took() { took_ns_ = NowNanos(); }

 private:
  int64_t took_ns_ = -1;
};

}  // namespace sluice::runtime::test

#endif  // SLUICE_RUNTIME_CONSUMER_TEST_UTIL_H_
