// Helpers shared by the built-in ops: build-time field checks with messages that name the
// field, and the element edits that mirror Schema::Remove / Schema::Set. Stateless functions,
// safe from any thread.
#ifndef SLUICE_OPS_OP_UTIL_H_
#define SLUICE_OPS_OP_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/ops/op.h"

namespace sluice::ops {

// The index of field `name` in `input`, after checking that its dtype is one of `dtypes`
// and its rank is `rank` (-1: any). `want` spells the requirement for the message, e.g.
// "u8[?,?,C]": "needs field 'image' as u8[?,?,C], got f32[3,224,224]".
StatusOr<int> RequireField(const Schema& input, std::string_view name,
                           std::initializer_list<DType> dtypes, int rank, std::string_view want);

// The tensor at `index` of `element`, after checking that the element still has the shape
// of the op's input schema (a mismatch is a pipeline bug, reported rather than crashed on).
StatusOr<const Tensor*> InputTensor(const Op& op, const Element& element, int index);

// Stores `tensor` at `index`: replaces the tensor there, or appends it when `index` is one
// past the end. Mirrors Schema::Set, whose return value is the index to pass.
void SetTensor(Element& element, int index, Tensor tensor);

// "u8[?,?,3]" for a field spec without its name.
std::string TypeString(const FieldSpec& field);
// "u8[375,500,3]" for a tensor.
std::string TypeString(const Tensor& tensor);

// Upper bounds shared by op arguments (docs/OPS.md lists every argument's range). Each is
// what a real pipeline could need times a wide margin, low enough that the sizes derived
// from it cannot overflow and that a spec alone cannot make one sample cost more than a few
// GiB. Floats are also finite (BindArgs rejects inf and nan).
//
// Values that end up in tensor elements (padding, clip bounds): within f32's range.
inline constexpr double kMaxArgValue = 1e38;
// Lengths in elements along one axis (pad_or_trim's length, one_hot's classes, FFT sizes):
// 2^27, the default decoded-image limit in pixels; 46 minutes of 48 kHz audio.
inline constexpr int64_t kMaxArgLength = int64_t{1} << 27;

// Builds an ArgSchema in one readable expression:
//   Arg("size", ArgType::kIntList).Length(2).Min(1).Doc("output [height, width]")
//   Arg("p", ArgType::kFloat).Default(0.5).Range(0, 1).Doc("probability of a flip")
// An argument without Default() is required.
class Arg {
 public:
  Arg(std::string name, ArgType type) {
    schema_.name = std::move(name);
    schema_.type = type;
  }
  Arg& Default(ArgValue value) {
    schema_.default_value = std::move(value);
    return *this;
  }
  Arg& Default(const char* value) { return Default(ArgValue(std::string(value))); }
  Arg& Doc(std::string doc) {
    schema_.doc = std::move(doc);
    return *this;
  }
  Arg& Length(int n) {
    schema_.list_length = n;
    return *this;
  }
  Arg& Choices(std::vector<std::string> choices) {
    schema_.choices = std::move(choices);
    return *this;
  }
  Arg& Min(double v) {
    schema_.min = v;
    return *this;
  }
  Arg& Max(double v) {
    schema_.max = v;
    return *this;
  }
  Arg& Range(double lo, double hi) { return Min(lo).Max(hi); }
  operator ArgSchema() const { return schema_; }  // NOLINT: meant to convert implicitly

 private:
  ArgSchema schema_;
};

// An OpSchema from its parts (spelled out rather than aggregate-initialised).
OpSchema MakeOpSchema(std::string name, bool random, std::string doc, std::vector<ArgSchema> args);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_OP_UTIL_H_
