// Iterator: the pull-based interface every pipeline stage implements (as in tf.data).
//
// GetNext() yields an element, end of stream, or an error. After end of stream or an error,
// further calls return the same result again. One consumer thread calls GetNext() at a time
// (thread-compatible); Cancel() may be called from any thread at any time and makes pending
// and future GetNext() calls return Cancelled promptly. Destroying an iterator cancels it
// and joins any threads it started.
#ifndef SLUICE_PIPELINE_ITERATOR_H_
#define SLUICE_PIPELINE_ITERATOR_H_

#include <memory>

#include "sluice/core/element.h"
#include "sluice/core/status.h"

namespace sluice::pipeline {

class Iterator {
 public:
  virtual ~Iterator() = default;

  // On success either fills `*out` and sets `*end_of_stream = false`, or sets
  // `*end_of_stream = true`.
  virtual Status GetNext(Element* out, bool* end_of_stream) = 0;

  // Cancels this iterator and its inputs.
  virtual void Cancel() = 0;

  // The schema of the elements produced.
  virtual const Schema& schema() const = 0;
};

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_ITERATOR_H_
