// Schema, SampleId and Element: the unit of data that flows through a pipeline.
//
// A Schema names the fields of an element with their dtype and shape (dimensions that are
// only known per sample are -1). Every op computes its output Schema from its input Schema
// when the pipeline is built, so a wrong pipeline fails before the first sample.
// An Element holds the tensors of one sample (or of one batch) in Schema order.
// Both are plain values; no internal synchronisation.
#ifndef SLUICE_CORE_ELEMENT_H_
#define SLUICE_CORE_ELEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/core/status.h"
#include "sluice/core/tensor.h"

namespace sluice {

inline constexpr int64_t kUnknownDim = -1;

struct FieldSpec {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;  // kUnknownDim where the size varies per sample

  int rank() const { return static_cast<int>(shape.size()); }
  std::string ToString() const;  // "image: u8[?,?,3]"
  bool operator==(const FieldSpec&) const = default;
};

class Schema {
 public:
  Schema() = default;
  explicit Schema(std::vector<FieldSpec> fields) : fields_(std::move(fields)) {}

  const std::vector<FieldSpec>& fields() const { return fields_; }
  int size() const { return static_cast<int>(fields_.size()); }
  const FieldSpec& field(int i) const { return fields_[i]; }

  // Index of `name`, or -1.
  int IndexOf(std::string_view name) const;
  // Index of `name`; NotFound naming the available fields otherwise.
  StatusOr<int> Find(std::string_view name) const;
  // Adds a field, or replaces the one with the same name. Returns its index.
  int Set(FieldSpec field);
  void Remove(std::string_view name);

  // True if `tensor` fits `field(i)` (dtype equal, rank equal, known dims equal).
  bool Matches(int i, const Tensor& tensor) const;
  std::string ToString() const;  // "{path: bytes[?], label: i64[]}"
  bool operator==(const Schema&) const = default;

 private:
  std::vector<FieldSpec> fields_;
};

// The identity of a sample: which epoch and which position in the source's (unshuffled)
// order. It is the unit of exactly-once accounting and the seed of the sample's randomness.
struct SampleId {
  uint32_t epoch = 0;
  uint64_t index = 0;
  bool operator==(const SampleId&) const = default;
  auto operator<=>(const SampleId&) const = default;
};

struct ImageRegion {
  int32_t full_height = 0;
  int32_t full_width = 0;
  int32_t x = 0;  // left column of the region, in full-resolution pixels
  int32_t y = 0;  // top row
  int32_t width = 0;
  int32_t height = 0;
  bool empty() const { return full_width == 0; }
};

struct Element {
  SampleId id;
  std::vector<Tensor> tensors;  // in Schema order
  // For batches: the ids of the members, in batch order (empty for a single sample).
  std::vector<SampleId> members;
  // Where the sample came from (its file path), for error messages.
  std::string origin;
  // Set by a decoder that decoded only part of the image, or at reduced size (DCT
  // scaling): the region of the full-resolution image that the decoded pixels cover.
  // Ops that draw geometry (random_resized_crop) draw it in full-resolution coordinates and
  // map it through this region, so that what they produce does not depend on how the image
  // was decoded. Empty (full_width == 0) when the image is whole and at full resolution.
  ImageRegion decoded_region;

  // Total payload bytes of all tensors.
  size_t nbytes() const;
};

}  // namespace sluice

#endif  // SLUICE_CORE_ELEMENT_H_
