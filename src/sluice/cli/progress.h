// A progress line on a terminal or a log. On a TTY the line is rewritten in place ("\r",
// then the text, then clear-to-end-of-line) at most 4 times a second; elsewhere (a file, a
// pipe, CI logs) a full line is printed at most every 2 seconds. Times are passed in by the
// caller (NowNanos()), which keeps the rate limiting testable. Single-threaded.
#ifndef SLUICE_CLI_PROGRESS_H_
#define SLUICE_CLI_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string_view>

namespace sluice::cli {

class ProgressLine {
 public:
  static constexpr int64_t kTtyIntervalNs = 250'000'000;
  static constexpr int64_t kLogIntervalNs = 2'000'000'000;

  // `start_ns`: when the work started; the first line is due one interval after it.
  ProgressLine(FILE* out, bool tty, int64_t start_ns);

  // True if a line would be shown at `now_ns` (so callers format text only when needed).
  bool Due(int64_t now_ns) const { return now_ns - last_ns_ >= interval_ns_; }
  // Shows `text` if due (or if `force`). Returns whether it printed.
  bool Update(int64_t now_ns, std::string_view text, bool force = false);
  // On a TTY, ends a line left open by Update(); elsewhere a no-op.
  void Finish();

 private:
  FILE* out_;
  bool tty_;
  int64_t interval_ns_;
  int64_t last_ns_;
  bool open_line_ = false;
};

}  // namespace sluice::cli

#endif  // SLUICE_CLI_PROGRESS_H_
