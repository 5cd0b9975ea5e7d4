#include "sluice/ops/registry.h"

#include <algorithm>
#include <opencv2/core.hpp>

#include "absl/strings/str_join.h"

namespace sluice::ops {
namespace {

// Levenshtein distance (insertions, deletions, substitutions each cost 1).
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const Registry& Registry::Builtin() {
  static const Registry* const registry = [] {
    // Each pipeline thread runs its ops single-threaded; OpenCV's own pool would only
    // oversubscribe the CPU budget.
    cv::setNumThreads(0);
    auto* r = new Registry;
    RegisterGenericOps(r);
    RegisterImageOps(r);
    RegisterAudioOps(r);
    RegisterAugmentOps(r);
    return r;
  }();
  return *registry;
}

Status Registry::Register(OpDef def) {
  if (Find(def.schema.name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("op '", def.schema.name, "' is already registered"));
  }
  defs_.push_back(std::make_unique<OpDef>(std::move(def)));
  return absl::OkStatus();
}

const OpDef* Registry::Find(std::string_view name) const {
  for (const auto& def : defs_) {
    if (def->schema.name == name) return def.get();
  }
  return nullptr;
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> names;
  for (const auto& def : defs_) names.push_back(def->schema.name);
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<std::unique_ptr<Op>> Registry::Create(std::string_view name,
                                               const std::map<std::string, ArgValue>& raw,
                                               const Schema& input) const {
  const OpDef* def = Find(name);
  if (def == nullptr) {
    // Suggest the closest names: a typo (small edit distance) or a part of a longer name.
    const size_t limit = std::max<size_t>(2, name.size() / 3);
    std::vector<std::pair<size_t, std::string>> close;
    for (const std::string& known : Names()) {
      size_t d = EditDistance(name, known);
      bool part = name.size() >= 3 && known.find(name) != std::string::npos;
      if (d <= limit || part) close.emplace_back(part ? std::min(d, limit) : d, known);
    }
    std::stable_sort(close.begin(), close.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> quoted;
    for (size_t i = 0; i < close.size() && i < 3; ++i) {
      quoted.push_back(absl::StrCat("'", close[i].second, "'"));
    }
    std::string hint =
        quoted.empty() ? "" : absl::StrCat(" (did you mean ", absl::StrJoin(quoted, " or "), "?)");
    return absl::InvalidArgumentError(absl::StrCat("unknown op '", Av(name), "'", hint,
                                                   "; `sluice ops` lists the available ops"));
  }
  SLUICE_ASSIGN_OR_RETURN(Args args, BindArgs(def->schema, raw));
  return def->factory(def->schema, args, input);
}

}  // namespace sluice::ops
