#include "sluice/runtime/train.h"

#include <algorithm>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sluice/core/clock.h"

namespace sluice::runtime {
namespace {

constexpr const char* kPolicyForms =
    "expected 'auto', 'sluice', 'fastflow', 'fastflow:code', 'none' or "
    "'fixed:cut=K,ratio=R[,read=local|remote][,compress=lz4|zstd|none][,spill=all|workers][,shares=a/b/...]'";

Status PolicyError(std::string_view text, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad policy '", Av(text), "': ", why, "; ", kPolicyForms));
}

}  // namespace

std::string TrainPolicy::ToString() const {
  if (name == "sluice" && is_auto) return "auto";
  if (name == "fastflow" && fastflow_code) return "fastflow:code";
  if (name != "fixed") return name;
  return PlacementString(*this);
}

StatusOr<TrainPolicy> ParsePolicy(std::string_view text, int num_ops) {
  TrainPolicy policy;
  if (text == "none") return policy;
  if (text == "auto" || text == "sluice") {
    policy.name = "sluice";
    policy.is_auto = text == "auto";
    return policy;
  }
  if (text == "fastflow" || text == "fastflow:paper" || text == "fastflow:code") {
    policy.name = "fastflow";
    policy.fastflow_code = text == "fastflow:code";
    return policy;
  }
  constexpr std::string_view kFixed = "fixed:";
  if (text.substr(0, kFixed.size()) != kFixed) {
    return PolicyError(text, "unknown policy");
  }
  StatusOr<Placement> placement = ParsePlacement(text, num_ops);
  if (!placement.ok()) return PolicyError(text, std::string(placement.status().message()));
  static_cast<Placement&>(policy) = *std::move(placement);
  policy.name = "fixed";
  return policy;
}

namespace {

class LoaderSource final : public BatchSource {
 public:
  explicit LoaderSource(Loader& loader) : loader_(loader) {}
  Status GetNext(Element* out, bool* end_of_stream) override {
    return loader_.GetNext(out, end_of_stream);
  }

 private:
  Loader& loader_;
};

}  // namespace

double WindowSamplesPerS(const std::vector<double>& step_end_s,
                         const std::vector<int64_t>& step_samples, double from_s, double to_s) {
  const size_t n = std::min(step_end_s.size(), step_samples.size());
  // The window runs between step ends: from the last at or before from_s (the loop's start
  // if none) to the last at or before to_s.
  double t0 = 0;
  int64_t s0 = 0;
  double t1 = 0;
  int64_t s1 = 0;
  for (size_t i = 0; i < n; ++i) {
    if (step_end_s[i] <= from_s) {
      t0 = step_end_s[i];
      s0 = step_samples[i];
    }
    if (step_end_s[i] <= to_s) {
      t1 = step_end_s[i];
      s1 = step_samples[i];
    }
  }
  return t1 > t0 ? static_cast<double>(s1 - s0) / (t1 - t0) : 0;
}

StatusOr<TrainResult> RunTraining(Loader& loader, const TrainOptions& options) {
  LoaderSource source(loader);
  return RunTraining(source, options);
}

StatusOr<TrainResult> RunTraining(BatchSource& loader, const TrainOptions& options) {
  TrainResult result;
  Element cached;
  bool have_cached = false;
  result.warmup_steps = options.warmup_steps >= 0
                            ? options.warmup_steps
                            : (options.steps >= 10 ? std::min<int64_t>(options.steps / 10, 10) : 0);
  const int64_t start = NowNanos();
  result.start_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  int64_t steady_start = start;
  int64_t steady_stall_from = 0;
  int64_t steady_samples_from = 0;
  int64_t stall_ns = 0;
  int64_t compute_ns = 0;
  const auto step_time =
      std::chrono::nanoseconds(static_cast<int64_t>(options.accelerator_ms * 1e6));
  bool settled = !options.settled;
  const auto mark_steady = [&] {
    steady_start = NowNanos();
    steady_stall_from = stall_ns;
    steady_samples_from = result.samples;
  };
  while (options.steps == 0 || result.steps - result.planning_steps < options.steps) {
    if (options.stop && options.stop()) {
      result.stopped = true;
      break;
    }
    Element batch;
    bool end = false;
    const int64_t wait_start = NowNanos();
    if (options.repeat_first_batch && have_cached) {
      batch = cached;  // shares the tensors' buffers: no copy
    } else {
      SLUICE_RETURN_IF_ERROR(loader.GetNext(&batch, &end));
      if (options.repeat_first_batch && !end) {
        cached = batch;
        have_cached = true;
      }
    }
    const int64_t got = NowNanos();
    stall_ns += got - wait_start;
    if (end) {
      result.data_ended = options.steps > 0;
      break;
    }
    result.samples += batch.members.empty() ? 1 : static_cast<int64_t>(batch.members.size());
    if (options.on_batch) options.on_batch(batch);
    batch = Element();  // the "accelerator" has the data now
    if (step_time.count() > 0) std::this_thread::sleep_for(step_time);
    compute_ns += NowNanos() - got;
    ++result.steps;
    result.step_end_s.push_back((NowNanos() - start) / 1e9);
    result.step_samples.push_back(result.samples);
    if (!settled) {
      settled = options.settled() || result.steps >= options.max_planning_steps;
      if (!settled) {
        result.planning_steps = result.steps;
      } else if (result.warmup_steps == 0) {
        mark_steady();  // the step that settled is left out: it ran under the old plan
      }
    }
    if (settled && result.steps - result.planning_steps == result.warmup_steps) mark_steady();
    if (options.on_step) {
      TrainProgress p;
      p.steps = result.steps;
      p.samples = result.samples;
      p.elapsed_s = (NowNanos() - start) / 1e9;
      p.stall_s = stall_ns / 1e9;
      options.on_step(p);
    }
  }
  const int64_t end = NowNanos();
  result.wall_s = (end - start) / 1e9;
  result.stall_s = stall_ns / 1e9;
  result.compute_s = compute_ns / 1e9;
  if (result.steps - result.planning_steps <= result.warmup_steps) {
    result.warmup_steps = 0;  // too short: whole run
  }
  if (result.warmup_steps == 0 && result.planning_steps == 0) {
    steady_start = start;
    steady_stall_from = 0;
    steady_samples_from = 0;
  }
  result.steady_wall_s = (end - steady_start) / 1e9;
  result.steady_stall_s = (stall_ns - steady_stall_from) / 1e9;
  result.steady_samples = result.samples - steady_samples_from;
  return result;
}

}  // namespace sluice::runtime
