#include "sluice/pipeline/build.h"

#include <utility>

#include "sluice/ops/url_storage.h"

namespace sluice::pipeline {

std::string OpLabel(int position, const std::string& name) {
  return absl::StrCat("ops[", position, "].", name);
}

std::shared_ptr<const ops::OpEnv> LocalEnv(const ops::InputLimits& limits) {
  auto env = std::make_shared<ops::OpEnv>();
  env->storage = &ops::LocalOrUrlStorage();  // the trainer reads its own spec: files and URLs
  env->limits = limits;
  return env;
}

std::string BuiltOps::Label(int i) const { return OpLabel(contexts[i].position, names[i]); }

StatusOr<BuiltOps> BuildOps(const std::vector<OpSpec>& op_specs, uint64_t seed,
                            const ops::Registry& registry, const Schema& input_schema,
                            int first_position, std::shared_ptr<const ops::OpEnv> env) {
  if (env == nullptr) env = LocalEnv(ops::InputLimits());
  BuiltOps built;
  built.input_schema = input_schema;
  Schema schema = input_schema;
  for (size_t i = 0; i < op_specs.size(); ++i) {
    const OpSpec& spec = op_specs[i];
    int position = first_position + static_cast<int>(i);
    StatusOr<std::unique_ptr<ops::Op>> op = registry.Create(spec.name, spec.args, schema);
    if (!op.ok()) return Annotate(op.status(), OpLabel(position, spec.name));
    schema = (*op)->output_schema();
    built.ops.push_back(*std::move(op));
    built.contexts.push_back(ops::OpContext{seed, position, env.get()});
    built.names.push_back(spec.name);
  }
  built.output_schema = std::move(schema);
  built.env = std::move(env);

  // A decoder may decode at reduced size when everything between it and the next scale
  // consumer (resize, random_resized_crop) works the same at any size.
  for (size_t i = 0; i < built.ops.size(); ++i) {
    for (size_t j = i + 1; j < built.ops.size(); ++j) {
      ops::Geometry g = built.ops[j]->geometry();
      if (g == ops::Geometry::kSizeIndependent) continue;
      if (g == ops::Geometry::kScaleConsumer) {
        built.ops[i]->SetScaleConsumer(built.ops[j].get(), built.contexts[j]);
      }
      break;
    }
  }
  return built;
}

}  // namespace sluice::pipeline
