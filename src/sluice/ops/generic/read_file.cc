// read_file: reads the file named by a bytes field into a new `data` field.
#include "sluice/ops/generic/generic_ops.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

class ReadFileOp final : public Op {
 public:
  ReadFileOp(const OpSchema* schema, Args args, Schema input, Schema output, int path_index,
             int data_index, int span_index, int problem_index)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        path_index_(path_index),
        data_index_(data_index),
        span_index_(span_index),
        problem_index_(problem_index) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* path, InputTensor(*this, element, path_index_));
    if (span_index_ < 0) {
      SLUICE_ASSIGN_OR_RETURN(
          Tensor data, ctx.env->storage->ReadFile(path->bytes(), ctx.env->limits.max_file_bytes));
      SetTensor(element, data_index_, std::move(data));
      return absl::OkStatus();
    }
    // A sample of a tar shard: its data member's byte range, unless the source found it
    // unreadable (a missing member, a damaged shard).
    SLUICE_ASSIGN_OR_RETURN(const Tensor* problem, InputTensor(*this, element, problem_index_));
    if (!problem->bytes().empty()) return absl::DataLossError(std::string(problem->bytes()));
    SLUICE_ASSIGN_OR_RETURN(const Tensor* span, InputTensor(*this, element, span_index_));
    if (span->dtype() != DType::kI64 || span->num_elements() != 2) {
      return absl::InvalidArgumentError("read_file: 'span' must be i64[2] (offset, size)");
    }
    const int64_t* where = span->data<int64_t>();
    SLUICE_ASSIGN_OR_RETURN(Tensor data,
                            ctx.env->storage->ReadRange(path->bytes(), where[0], where[1],
                                                        ctx.env->limits.max_file_bytes));
    SetTensor(element, data_index_, std::move(data));
    return absl::OkStatus();
  }

 private:
  int path_index_;
  int data_index_;
  int span_index_;  // -1: a whole file
  int problem_index_;
};

}  // namespace

OpDef ReadFileOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "read_file", /*random=*/false,
      "Reads the whole file named by `field` into a new field `data` (bytes[?]); `field` is "
      "kept. Only regular files are read, up to options.max_file_bytes; on a worker the path "
      "resolves under its --data-root. With a `shards` source it reads the sample's member "
      "(the `span` field) from its shard.",
      {Arg("field", ArgType::kString)
           .Default("path")
           .Doc("the bytes field holding the file path")});
  def.schema.reads_files = true;
  def.schema.reads_sample = true;
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(
        int path, RequireField(input, args.String("field"), {DType::kBytes}, 1, "bytes[?]"));
    // A tar shard's source (docs/shards.md) adds `span` and `problem`: the member is read.
    const int span = input.IndexOf("span");
    const int problem = input.IndexOf("problem");
    if ((span >= 0) != (problem >= 0)) {
      return absl::InvalidArgumentError(
          "read_file: a shard sample needs both 'span' and 'problem' fields");
    }
    Schema output = input;
    int data = output.Set(FieldSpec{"data", DType::kBytes, {kUnknownDim}});
    return std::make_unique<ReadFileOp>(&schema, args, input, std::move(output), path, data, span,
                                        problem);
  };
  return def;
}

}  // namespace sluice::ops
