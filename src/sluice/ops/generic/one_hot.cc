// one_hot: an integer class label (scalar, or a vector of labels) -> one-hot vector(s).
#include "sluice/ops/generic/generic_ops.h"
#include "sluice/ops/generic/numeric.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

// 2^24 classes: 5x the largest extreme-classification label sets (a few million); one
// sample's vector stays under 128 MiB even as f64.
constexpr int64_t kMaxClasses = int64_t{1} << 24;

class OneHotOp final : public Op {
 public:
  OneHotOp(const OpSchema* schema, Args args, Schema input, Schema output, int index,
           int64_t num_classes, DType dtype)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        index_(index),
        num_classes_(num_classes),
        dtype_(dtype) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, index_));
    const int64_t n = in->num_elements();
    Shape shape = in->shape();
    shape.push_back(num_classes_);
    Tensor out = Tensor::Zeros(dtype_, shape);
    for (int64_t i = 0; i < n; ++i) {
      double label = LoadNumber(in->dtype(), in->raw(), i);
      if (label < 0 || label >= static_cast<double>(num_classes_)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "label ", static_cast<int64_t>(label), " in field '", input_schema().field(index_).name,
            "' is outside [0, ", num_classes_, ")"));
      }
      StoreNumber(dtype_, out.mutable_raw(), i * num_classes_ + static_cast<int64_t>(label), 1.0);
    }
    element.tensors[index_] = std::move(out);
    return absl::OkStatus();
  }

 private:
  int index_;
  int64_t num_classes_;
  DType dtype_;
};

}  // namespace

OpDef OneHotOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "one_hot", /*random=*/false,
      "Replaces an integer label (i64[] or a vector of labels) with a one-hot vector of "
      "`num_classes` entries (an extra last dimension). A label outside [0, num_classes) is "
      "an error.",
      {Arg("field", ArgType::kString).Default("label").Doc("the integer label field"),
       Arg("num_classes", ArgType::kInt)
           .Range(1, kMaxClasses)
           .Doc("the number of classes (vector length)"),
       Arg("dtype", ArgType::kString)
           .Default("f32")
           .Choices(NumericDTypeNames())
           .Doc("dtype of the one-hot vector")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    const std::string& name = args.String("field");
    SLUICE_ASSIGN_OR_RETURN(
        int index, RequireField(input, name, {DType::kU8, DType::kI16, DType::kI32, DType::kI64},
                                -1, "an integer scalar or vector (e.g. i64[])"));
    if (input.field(index).rank() > 1) {
      return absl::InvalidArgumentError(absl::StrCat("needs field '", name,
                                                     "' as an integer scalar or vector, got ",
                                                     TypeString(input.field(index))));
    }
    SLUICE_ASSIGN_OR_RETURN(DType dtype, ParseDType(args.String("dtype")));
    FieldSpec field = input.field(index);
    field.dtype = dtype;
    field.shape.push_back(args.Int("num_classes"));
    Schema output = input;
    output.Set(field);
    return std::make_unique<OneHotOp>(&schema, args, input, std::move(output), index,
                                      args.Int("num_classes"), dtype);
  };
  return def;
}

}  // namespace sluice::ops
