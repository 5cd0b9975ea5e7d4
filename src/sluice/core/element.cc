#include "sluice/core/element.h"

#include "absl/strings/str_join.h"

namespace sluice {

std::string FieldSpec::ToString() const {
  std::vector<std::string> dims;
  for (int64_t d : shape) dims.push_back(d == kUnknownDim ? "?" : std::to_string(d));
  return absl::StrCat(name, ": ", DTypeName(dtype), "[", absl::StrJoin(dims, ","), "]");
}

int Schema::IndexOf(std::string_view name) const {
  for (int i = 0; i < size(); ++i) {
    if (fields_[i].name == name) return i;
  }
  return -1;
}

StatusOr<int> Schema::Find(std::string_view name) const {
  int i = IndexOf(name);
  if (i >= 0) return i;
  std::vector<std::string> names;
  for (const FieldSpec& f : fields_) names.push_back(f.name);
  return absl::NotFoundError(absl::StrCat("no field '", Av(name), "' (the element has: ",
                                          names.empty() ? "nothing" : absl::StrJoin(names, ", "),
                                          ")"));
}

int Schema::Set(FieldSpec field) {
  int i = IndexOf(field.name);
  if (i >= 0) {
    fields_[i] = std::move(field);
    return i;
  }
  fields_.push_back(std::move(field));
  return size() - 1;
}

void Schema::Remove(std::string_view name) {
  int i = IndexOf(name);
  if (i >= 0) fields_.erase(fields_.begin() + i);
}

bool Schema::Matches(int i, const Tensor& tensor) const {
  const FieldSpec& f = fields_[i];
  if (f.dtype != tensor.dtype() || f.rank() != tensor.rank()) return false;
  for (int d = 0; d < f.rank(); ++d) {
    if (f.shape[d] != kUnknownDim && f.shape[d] != tensor.dim(d)) return false;
  }
  return true;
}

std::string Schema::ToString() const {
  std::vector<std::string> parts;
  for (const FieldSpec& f : fields_) parts.push_back(f.ToString());
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

size_t Element::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : tensors) n += t.nbytes();
  return n;
}

}  // namespace sluice
