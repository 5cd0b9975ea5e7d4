#include "sluice/cli/progress.h"

namespace sluice::cli {

ProgressLine::ProgressLine(FILE* out, bool tty, int64_t start_ns)
    : out_(out),
      tty_(tty),
      interval_ns_(tty ? kTtyIntervalNs : kLogIntervalNs),
      last_ns_(start_ns) {}

bool ProgressLine::Update(int64_t now_ns, std::string_view text, bool force) {
  if (!force && !Due(now_ns)) return false;
  last_ns_ = now_ns;
  const int len = static_cast<int>(text.size());
  if (tty_) {
    std::fprintf(out_, "\r%.*s\x1b[K", len, text.data());
    open_line_ = true;
  } else {
    std::fprintf(out_, "%.*s\n", len, text.data());
  }
  std::fflush(out_);
  return true;
}

void ProgressLine::Finish() {
  if (tty_ && open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  open_line_ = false;
}

}  // namespace sluice::cli
