#include "sluice/ops/op_util.h"

#include "absl/strings/str_join.h"

namespace sluice::ops {

std::string TypeString(const FieldSpec& field) {
  std::vector<std::string> dims;
  for (int64_t d : field.shape) dims.push_back(d == kUnknownDim ? "?" : std::to_string(d));
  return absl::StrCat(DTypeName(field.dtype), "[", absl::StrJoin(dims, ","), "]");
}

std::string TypeString(const Tensor& tensor) { return tensor.DebugString(); }

StatusOr<int> RequireField(const Schema& input, std::string_view name,
                           std::initializer_list<DType> dtypes, int rank, std::string_view want) {
  int index = input.IndexOf(name);
  if (index < 0) {
    std::vector<std::string> names;
    for (const FieldSpec& f : input.fields()) names.push_back(f.name);
    return absl::InvalidArgumentError(
        absl::StrCat("needs field '", Av(name), "' as ", Av(want),
                     ", but the element has no such field (it has: ",
                     names.empty() ? "nothing" : absl::StrJoin(names, ", "), ")"));
  }
  const FieldSpec& field = input.field(index);
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= field.dtype == d;
  if (!dtype_ok || (rank >= 0 && field.rank() != rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("needs field '", Av(name), "' as ", Av(want), ", got ", TypeString(field)));
  }
  return index;
}

StatusOr<const Tensor*> InputTensor(const Op& op, const Element& element, int index) {
  const Schema& schema = op.input_schema();
  if (static_cast<int>(element.tensors.size()) != schema.size() || index >= schema.size()) {
    return absl::InternalError(absl::StrCat("the element has ", element.tensors.size(),
                                            " tensors but the op was built for ",
                                            schema.ToString()));
  }
  const Tensor& t = element.tensors[index];
  if (!schema.Matches(index, t)) {
    return absl::InvalidArgumentError(absl::StrCat("field '", schema.field(index).name, "' is ",
                                                   TypeString(t), ", expected ",
                                                   TypeString(schema.field(index))));
  }
  return &t;
}

void SetTensor(Element& element, int index, Tensor tensor) {
  if (index == static_cast<int>(element.tensors.size())) {
    element.tensors.push_back(std::move(tensor));
  } else {
    element.tensors[index] = std::move(tensor);
  }
}

OpSchema MakeOpSchema(std::string name, bool random, std::string doc, std::vector<ArgSchema> args) {
  OpSchema schema;
  schema.name = std::move(name);
  schema.random = random;
  schema.doc = std::move(doc);
  schema.args = std::move(args);
  return schema;
}

}  // namespace sluice::ops
