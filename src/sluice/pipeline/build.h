// Building the ops of a spec: every op is created through the registry against the schema
// its predecessor produces, starting from the source schema, so a wrong pipeline fails here
// with the op named ("ops[3].normalize: needs field 'image' ..."). Then decoders are told
// which later op consumes the image at a reduced scale (see ops::Op::SetScaleConsumer).
// The result is immutable and its ops are safe to Apply() from many threads.
#ifndef SLUICE_PIPELINE_BUILD_H_
#define SLUICE_PIPELINE_BUILD_H_

#include <memory>
#include <string>
#include <vector>

#include "sluice/core/element.h"
#include "sluice/core/status.h"
#include "sluice/ops/op.h"
#include "sluice/ops/registry.h"
#include "sluice/pipeline/spec.h"

namespace sluice::pipeline {

struct BuiltOps {
  std::vector<std::unique_ptr<ops::Op>> ops;
  std::vector<ops::OpContext> contexts;  // {seed, position} of each op
  std::vector<std::string> names;        // the op names, in order
  Schema input_schema;                   // what the first op sees
  Schema output_schema;                  // what the last op produces (input if no ops)
  std::shared_ptr<const ops::OpEnv> env;  // what every context points at

  // "ops[3].normalize": how errors and reports name op i.
  std::string Label(int i) const;
};

// Creates `op_specs` in order. `seed` is the pipeline seed (spec.source.seed); op i gets
// OpContext{seed, first_position + i, env}. Errors are prefixed "ops[<position>].<name>: ".
// `env` (null: LocalEnv() with default limits) is kept alive by the result.
StatusOr<BuiltOps> BuildOps(const std::vector<OpSpec>& op_specs, uint64_t seed,
                            const ops::Registry& registry, const Schema& input_schema,
                            int first_position = 0,
                            std::shared_ptr<const ops::OpEnv> env = nullptr);

// Where a trainer (or `sluice run`) runs ops: files as the spec names them, under the
// spec's limits (spec.options.limits).
std::shared_ptr<const ops::OpEnv> LocalEnv(const ops::InputLimits& limits);

// "ops[<position>].<name>"
std::string OpLabel(int position, const std::string& name);

}  // namespace sluice::pipeline

#endif  // SLUICE_PIPELINE_BUILD_H_
