// Content digests of delivered samples, for checking that two runs (1 vs 2 threads, local vs
// offloaded) delivered the same data whatever order the samples arrived in.
//
// Every sample of every batch is digested separately (its slice of each tensor: dtype,
// shape and bytes) and keyed by its SampleId, so the result does not depend on batch order
// or on which samples shared a batch. A plain single-threaded value.
#ifndef SLUICE_CORE_SAMPLE_DIGESTS_H_
#define SLUICE_CORE_SAMPLE_DIGESTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "sluice/core/element.h"

namespace sluice {

// A 64-bit non-cryptographic hash of `bytes`, stable across runs and machines.
uint64_t Digest64(std::string_view bytes, uint64_t seed = 0);

class SampleDigests {
 public:
  // Adds every sample of `element`: a batch (members non-empty, tensors with a leading
  // batch dimension) or a single sample.
  void Add(const Element& element);

  size_t size() const { return digests_.size(); }
  // One line per sample in SampleId order, "<epoch> <index> <16 hex digits>", then
  // "all <16 hex digits>" combining them.
  std::string ToString() const;
  uint64_t Combined() const;

 private:
  std::map<SampleId, uint64_t> digests_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_SAMPLE_DIGESTS_H_
