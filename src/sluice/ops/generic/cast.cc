// cast: converts a numeric field to another numeric dtype, keeping its shape.
#include "sluice/ops/generic/generic_ops.h"
#include "sluice/ops/generic/numeric.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

class CastOp final : public Op {
 public:
  CastOp(const OpSchema* schema, Args args, Schema input, Schema output, int index, DType to)
      : Op(schema, std::move(args), std::move(input), std::move(output)), index_(index), to_(to) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* in, InputTensor(*this, element, index_));
    if (in->dtype() == to_) return absl::OkStatus();
    Tensor out = ctx.NewOutput(index_, to_, in->shape());
    const int64_t n = in->num_elements();
    const DType from = in->dtype();
    const uint8_t* src = in->raw();
    uint8_t* dst = out.mutable_raw();
    if (from == DType::kU8 && to_ == DType::kF32) {  // the common case, kept tight
      float* f = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) f[i] = src[i];
    } else {
      for (int64_t i = 0; i < n; ++i) StoreNumber(to_, dst, i, LoadNumber(from, src, i));
    }
    element.tensors[index_] = std::move(out);
    return absl::OkStatus();
  }

 private:
  int index_;
  DType to_;
};

}  // namespace

OpDef CastOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "cast", /*random=*/false,
      "Converts a numeric field to another dtype, same shape. Floats to integers truncate "
      "toward zero and saturate; NaN becomes 0.",
      {Arg("field", ArgType::kString).Default("image").Doc("the field to convert"),
       Arg("dtype", ArgType::kString).Choices(NumericDTypeNames()).Doc("the new dtype")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(
        int index, RequireField(input, args.String("field"),
                                {DType::kU8, DType::kI16, DType::kI32, DType::kI64, DType::kF16,
                                 DType::kF32, DType::kF64},
                                -1, "a numeric tensor"));
    SLUICE_ASSIGN_OR_RETURN(DType to, ParseDType(args.String("dtype")));
    Schema output = input;
    FieldSpec field = input.field(index);
    field.dtype = to;
    output.Set(field);
    return std::make_unique<CastOp>(&schema, args, input, std::move(output), index, to);
  };
  return def;
}

}  // namespace sluice::ops
