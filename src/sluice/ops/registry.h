// Registry: the one explicit list of operators a process knows. There is no static
// registration: Builtin() calls each family's Register*Ops() in order. Read-only after
// construction, hence thread-safe.
#ifndef SLUICE_OPS_REGISTRY_H_
#define SLUICE_OPS_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "sluice/ops/op.h"

namespace sluice::ops {

struct OpDef {
  OpSchema schema;
  OpFactory factory;
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Every built-in op.
  static const Registry& Builtin();

  // AlreadyExists if the name is taken.
  Status Register(OpDef def);

  const OpDef* Find(std::string_view name) const;
  std::vector<std::string> Names() const;  // sorted

  // Binds `raw` args and builds the op on `input`. Errors: unknown op (with the nearest
  // known names), argument errors, schema errors.
  StatusOr<std::unique_ptr<Op>> Create(std::string_view name,
                                       const std::map<std::string, ArgValue>& raw,
                                       const Schema& input) const;

 private:
  std::vector<std::unique_ptr<OpDef>> defs_;  // stable addresses: ops point at their schema
};

// Families of built-in ops, each in its own file.
void RegisterImageOps(Registry* registry);    // ops/image/
void RegisterGenericOps(Registry* registry);  // ops/generic/ (read_file, cast, one_hot)
// ops/audio/ (decode_wav, resample, add_noise, spectrogram, mel, log, rfft, ...)
void RegisterAudioOps(Registry* registry);
// ops/image/augment_ops.cc (rand_augment, read_box, crop_box, clip)
void RegisterAugmentOps(Registry* registry);

}  // namespace sluice::ops

#endif  // SLUICE_OPS_REGISTRY_H_
