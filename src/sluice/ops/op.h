// Operators: what an op *is* (immutable, shareable across threads) as opposed to where a
// stream is (that state lives in the pipeline's iterators).
//
// Each op has a declarative OpSchema (name, typed arguments with defaults and docs). The
// spec validator, the CLI help and the Python docstrings all read the same schema. An op
// instance is created by its factory from bound Args and the input Schema, computes its
// output Schema there (so a wrong pipeline fails at build time naming the op and field),
// and then transforms elements with Apply(), which must be safe to call concurrently.
#ifndef SLUICE_OPS_OP_H_
#define SLUICE_OPS_OP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "sluice/core/batch_slots.h"
#include "sluice/core/element.h"
#include "sluice/core/rng.h"
#include "sluice/core/status.h"
#include "sluice/ops/storage.h"

namespace sluice::ops {

enum class ArgType { kInt, kFloat, kBool, kString, kIntList, kFloatList };
std::string_view ArgTypeName(ArgType type);  // "int", "float", "bool", "string", ...

using ArgValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                              std::vector<double>>;
std::string ArgValueToString(const ArgValue& value);  // JSON-like: 3, 0.5, true, "x", [1,2]

struct ArgSchema {
  std::string name;
  ArgType type = ArgType::kInt;
  std::optional<ArgValue> default_value;  // nullopt: the argument is required
  std::string doc;
  // For lists: the exact length required (-1: any length >= 1). A scalar given for a list
  // of fixed length is broadcast (`size: 224` -> [224, 224]).
  int list_length = -1;
  // For strings: the accepted values (empty: any).
  std::vector<std::string> choices;
  // Inclusive numeric bounds applied to ints, floats and every list entry.
  std::optional<double> min;
  std::optional<double> max;
};

struct OpSchema {
  std::string name;
  std::string doc;
  std::vector<ArgSchema> args;
  // Draws from the identity-seeded RNG (so its output depends on SampleId).
  bool random = false;
  // Reads files through OpContext::env->storage (a worker without --data-root refuses
  // sessions that would run such an op).
  bool reads_files = false;
  // Turns the source's path into the sample's bytes: the op a trainer runs itself under
  // read=local and ships the output of (it can only be ops[0]), and whose output size is the
  // sample's raw size. read_file.
  bool reads_sample = false;

  const ArgSchema* FindArg(std::string_view arg_name) const;
};

// Argument values after binding: every argument of the schema is present (defaults filled
// in), with exactly the schema's type.
class Args {
 public:
  Args() = default;
  explicit Args(std::map<std::string, ArgValue> values) : values_(std::move(values)) {}

  // REQUIRES: the argument exists with that type (guaranteed after BindArgs).
  int64_t Int(const std::string& name) const { return std::get<int64_t>(values_.at(name)); }
  double Float(const std::string& name) const { return std::get<double>(values_.at(name)); }
  bool Bool(const std::string& name) const { return std::get<bool>(values_.at(name)); }
  const std::string& String(const std::string& name) const {
    return std::get<std::string>(values_.at(name));
  }
  const std::vector<int64_t>& IntList(const std::string& name) const {
    return std::get<std::vector<int64_t>>(values_.at(name));
  }
  const std::vector<double>& FloatList(const std::string& name) const {
    return std::get<std::vector<double>>(values_.at(name));
  }
  const std::map<std::string, ArgValue>& values() const { return values_; }

 private:
  std::map<std::string, ArgValue> values_;
};

// Checks `raw` against `schema`: unknown arguments, missing required ones, wrong types,
// list lengths, choices and bounds. Ints are accepted for floats, int lists for float lists,
// scalars for fixed-length lists. Errors name the argument: "size: expected 2 ints, got 3".
StatusOr<Args> BindArgs(const OpSchema& schema, const std::map<std::string, ArgValue>& raw);

// Where an op instance sits in a pipeline; the same for every element it sees.
struct OpContext {
  uint64_t seed = 0;  // the pipeline's seed
  int position = 0;   // index in the spec's `ops` list
  // Where the op runs: the storage files are read through and the input limits. Never null;
  // outlives the op.
  const OpEnv* env = &DefaultOpEnv();

  // Where the op's outputs go when it is the last op before the batcher: one BatchSlots per
  // output field index whose shape is fully known (core/batch_slots.h). Empty elsewhere.
  std::map<int, std::shared_ptr<BatchSlots>> batch_slots = {};

  // The identity-seeded generator for `element` at this op.
  Rng MakeRng(const Element& element) const {
    return Rng(SeedFor(seed, element.id.epoch, element.id.index, static_cast<uint32_t>(position)));
  }
  // A new tensor for the op's output field `field` (an index in its output schema),
  // uninitialised: its slot of the batch being filled when the context has slots for that
  // field and `dtype` and `shape` are theirs, else Tensor::Empty. An op that writes a whole
  // new output tensor takes it from here; its result is the same either way.
  Tensor NewOutput(int field, DType dtype, Shape shape) const {
    auto it = batch_slots.find(field);
    return it == batch_slots.end() ? Tensor::Empty(dtype, std::move(shape))
                                   : it->second->Take(dtype, shape);
  }
  // Whether NewOutput hands out batch slots for `field` now (a worker's shared slots only
  // once the trainer's are attached, BatchSlots::active).
  bool HasBatchSlots(int field) const {
    auto it = batch_slots.find(field);
    return it != batch_slots.end() && it->second->active();
  }
};

// How an op relates to image size, for decoders that can decode at reduced resolution.
enum class Geometry {
  kOther,            // needs the image as decoded (default; stops the search)
  kSizeIndependent,  // works the same at any resolution and keeps the size (flip, jitter)
  kScaleConsumer,    // resamples to a target size, so a smaller input is fine (resize, rrc)
};

// What a scale-consuming op needs from a decoder, in full-resolution pixels.
struct DecodeRequest {
  // The smallest acceptable scale factor in (0, 1]: the decoded region must keep at least
  // this fraction of its full-resolution width and height.
  double min_scale = 1.0;
  // The region the op reads; width == 0 means the whole image.
  int64_t x = 0, y = 0, width = 0, height = 0;
};

class Op {
 public:
  virtual ~Op() = default;

  const OpSchema& schema() const { return *schema_; }
  const Args& args() const { return args_; }
  const Schema& input_schema() const { return input_; }
  const Schema& output_schema() const { return output_; }

  // Transforms `element` (tensors in input-schema order on entry, output-schema order on
  // return). Thread-safe. A failed element returns an error that says why (the pipeline
  // adds the op name and the sample's file).
  virtual Status Apply(Element& element, const OpContext& ctx) const = 0;

  virtual Geometry geometry() const { return Geometry::kOther; }

  // For kScaleConsumer ops: what part of an image of full size (full_height, full_width)
  // this op will read for `element`, and how small it may be decoded. Decoders use it to
  // skip work (DCT scaling, skipping rows and columns). Default: all of it, full size.
  virtual DecodeRequest NeededInput(const Element& element, const OpContext& ctx,
                                    int64_t full_height, int64_t full_width) const {
    return DecodeRequest{};
  }

  // For decoders: called once at build time with the first kScaleConsumer after this op
  // (only kSizeIndependent ops in between). REQUIRES: called before any Apply().
  virtual void SetScaleConsumer(const Op* consumer, OpContext consumer_ctx) {}

 protected:
  Op(const OpSchema* schema, Args args, Schema input, Schema output)
      : schema_(schema), args_(std::move(args)), input_(std::move(input)), output_(std::move(output)) {}

 private:
  const OpSchema* schema_;
  Args args_;
  Schema input_;
  Schema output_;
};

// Builds an op from bound args and its input schema; fails (naming the field) when the
// input does not fit, e.g. "needs field 'image' as u8[?,?,3], got f32[3,224,224]".
using OpFactory =
    std::function<StatusOr<std::unique_ptr<Op>>(const OpSchema& schema, const Args& args,
                                                const Schema& input)>;

}  // namespace sluice::ops

#endif  // SLUICE_OPS_OP_H_
