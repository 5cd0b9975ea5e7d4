// read_file: reads the file named by a bytes field into a new `data` field.
#include "sluice/ops/generic/generic_ops.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

class ReadFileOp final : public Op {
 public:
  ReadFileOp(const OpSchema* schema, Args args, Schema input, Schema output, int path_index,
             int data_index)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        path_index_(path_index),
        data_index_(data_index) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* path, InputTensor(*this, element, path_index_));
    SLUICE_ASSIGN_OR_RETURN(
        Tensor data, ctx.env->storage->ReadFile(path->bytes(), ctx.env->limits.max_file_bytes));
    SetTensor(element, data_index_, std::move(data));
    return absl::OkStatus();
  }

 private:
  int path_index_;
  int data_index_;
};

}  // namespace

OpDef ReadFileOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "read_file", /*random=*/false,
      "Reads the whole file named by `field` into a new field `data` (bytes[?]); `field` is "
      "kept. Only regular files are read, up to options.max_file_bytes; on a worker the path "
      "resolves under its --data-root.",
      {Arg("field", ArgType::kString)
           .Default("path")
           .Doc("the bytes field holding the file path")});
  def.schema.reads_files = true;
  def.schema.reads_sample = true;
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(
        int path, RequireField(input, args.String("field"), {DType::kBytes}, 1, "bytes[?]"));
    Schema output = input;
    int data = output.Set(FieldSpec{"data", DType::kBytes, {kUnknownDim}});
    return std::make_unique<ReadFileOp>(&schema, args, input, std::move(output), path, data);
  };
  return def;
}

}  // namespace sluice::ops
