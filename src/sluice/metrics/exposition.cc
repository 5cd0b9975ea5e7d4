#include "sluice/metrics/exposition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sluice::metrics {
namespace {

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest of 15 and 17 significant digits that reads back as `v`.
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// Help text escapes backslash and newline; label values also the double quote.
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

void AppendLabels(std::string* out, const Labels& labels, const std::string& extra_name = "",
                  const std::string& extra_value = "") {
  if (labels.empty() && extra_name.empty()) return;
  *out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) *out += ',';
    first = false;
    *out += k + "=\"" + Escape(v, true) + '"';
  }
  if (!extra_name.empty()) {
    if (!first) *out += ',';
    *out += extra_name + "=\"" + extra_value + '"';
  }
  *out += '}';
}

}  // namespace

Family Family::Counter(std::string name, std::string help) {
  return Family{std::move(name), std::move(help), Type::kCounter, {}, {}};
}
Family Family::Gauge(std::string name, std::string help) {
  return Family{std::move(name), std::move(help), Type::kGauge, {}, {}};
}
Family Family::Histogram(std::string name, std::string help) {
  return Family{std::move(name), std::move(help), Type::kHistogram, {}, {}};
}
Family& Family::Add(double value, Labels labels) {
  samples.push_back(Sample{std::move(labels), value});
  return *this;
}

bool ValidName(const std::string& name, bool label) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                       (!label && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return !(label && name.rfind("__", 0) == 0);  // reserved for Prometheus itself
}

std::string WriteText(const std::vector<Family>& families) {
  std::string out;
  for (const Family& f : families) {
    out += "# HELP " + f.name + ' ' + Escape(f.help, false) + '\n';
    out += "# TYPE " + f.name + ' ' + TypeName(f.type) + '\n';
    for (const Sample& s : f.samples) {
      if (f.type == Type::kCounter && std::isnan(s.value)) continue;
      out += f.name;
      AppendLabels(&out, s.labels);
      out += ' ' + Number(s.value) + '\n';
    }
    for (const HistogramSample& h : f.histograms) {
      uint64_t cumulative = 0;
      for (size_t b = 0; b < h.buckets.size(); ++b) {
        cumulative += h.buckets[b];
        out += f.name + "_bucket";
        AppendLabels(&out, h.labels, "le",
                     b < h.bounds.size() ? Number(h.bounds[b]) : std::string("+Inf"));
        out += ' ' + std::to_string(cumulative) + '\n';
      }
      out += f.name + "_sum";
      AppendLabels(&out, h.labels);
      out += ' ' + Number(h.sum) + '\n';
      out += f.name + "_count";
      AppendLabels(&out, h.labels);
      out += ' ' + std::to_string(cumulative) + '\n';
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  std::sort(bounds_.begin(), bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  const size_t b = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<int64_t>(std::llround(value * 1e9)), std::memory_order_relaxed);
}

HistogramSample Histogram::Snapshot(Labels labels) const {
  HistogramSample s;
  s.labels = std::move(labels);
  s.bounds = bounds_;
  s.buckets.resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  }
  s.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

std::vector<double> Histogram::ExponentialBounds(double start, double factor, int count) {
  std::vector<double> out;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

}  // namespace sluice::metrics
