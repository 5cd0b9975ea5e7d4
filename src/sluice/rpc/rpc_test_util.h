// Helpers for the rpc tests only: a temporary folder with a small JPEG data set, the spec
// the tests offload, the local reference result of running a prefix of its ops, and
// comparison of element sets by SampleId.
#ifndef SLUICE_RPC_RPC_TEST_UTIL_H_
#define SLUICE_RPC_RPC_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sluice/ops/op_test_util.h"
#include "sluice/pipeline/batch.h"
#include "sluice/pipeline/build.h"
#include "sluice/pipeline/map.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/spec.h"

namespace sluice::rpc::test {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "sluice-rpc-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& rel, const std::string& bytes) const {
    std::filesystem::path p = std::filesystem::path(path_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

 private:
  std::string path_;
};

// `count` JPEGs of varying sizes in two class folders: <dir>/data/{cat,dog}/NN.jpg.
inline void WriteJpegs(const TempDir& dir, int count) {
  for (int i = 0; i < count; ++i) {
    Tensor img = ops::test::TexturedImage(40 + 3 * (i % 5), 48 + 2 * (i % 7), 3, i + 1);
    dir.Write(absl::StrCat("data/", i % 2 ? "dog" : "cat", "/", 10 + i, ".jpg"),
              ops::test::EncodeJpeg(img));
  }
}

// read_file, decode_jpeg, random_resized_crop, random_flip, normalize; batches of 4.
inline pipeline::PipelineSpec ImageSpec(const std::string& files_glob) {
  pipeline::PipelineSpec spec;
  spec.source.files = {files_glob};
  spec.source.label = pipeline::LabelMode::kParentDir;
  spec.source.shuffle = true;
  spec.source.seed = 7;
  spec.ops = {{"read_file", {}},
              {"decode_jpeg", {}},
              {"random_resized_crop", {{"size", std::vector<int64_t>{24, 24}}}},
              {"random_flip", {}},
              {"normalize",
               {{"mean", std::vector<double>{0.5, 0.4, 0.3}},
                {"std", std::vector<double>{0.2, 0.2, 0.2}}}}};
  spec.batch.size = 4;
  return spec;
}

// The source elements of epoch `epoch`, in its order.
inline std::vector<Element> SourceElements(const pipeline::PipelineSpec& spec, uint32_t epoch) {
  auto files = pipeline::ResolveSource(spec.source);
  EXPECT_TRUE(files.ok()) << files.status();
  std::vector<Element> out;
  const bool label = spec.source.label == pipeline::LabelMode::kParentDir;
  for (uint64_t index :
       pipeline::EpochOrder(files->paths.size(), spec.source.shuffle, spec.source.seed, epoch)) {
    out.push_back(pipeline::MakeSourceElement(*files, label, epoch, index));
  }
  return out;
}

// Runs ops [begin, end) of `spec` on `elements` locally (end = -1: all ops, then batches of
// spec.batch.size in the order given).
inline std::vector<Element> RunLocally(const pipeline::PipelineSpec& spec,
                                       std::vector<Element> elements, int begin, int end) {
  const bool after_batch = end < 0;
  const int stop = after_batch ? static_cast<int>(spec.ops.size()) : end;
  // All ops are built (as in the trainer), so decoders size their decode for the crop
  // after them even when only a prefix runs.
  auto built = pipeline::BuildOps(spec.ops, spec.source.seed, ops::Registry::Builtin(),
                                  pipeline::SourceSchema(spec.source));
  EXPECT_TRUE(built.ok()) << built.status();
  std::vector<pipeline::MapStage> stages = pipeline::MakeStages(*built, nullptr, begin, stop);
  for (Element& e : elements) EXPECT_TRUE(pipeline::ApplyStages(stages, e).ok());
  if (!after_batch || spec.batch.size <= 0) return elements;
  pipeline::BatchOptions options;
  options.size = spec.batch.size;
  std::vector<Element> batches;
  for (size_t i = 0; i < elements.size(); i += options.size) {
    std::vector<Element> members;
    for (size_t j = i; j < std::min(elements.size(), i + options.size); ++j) {
      members.push_back(elements[j]);
    }
    auto batch = pipeline::StackBatch(std::move(members), built->output_schema, options);
    EXPECT_TRUE(batch.ok()) << batch.status();
    batches.push_back(*std::move(batch));
  }
  return batches;
}

// Expects the same elements (by SampleId, any order), bit for bit.
inline void ExpectSameById(const std::vector<Element>& expected, const std::vector<Element>& got) {
  ASSERT_EQ(expected.size(), got.size());
  std::map<SampleId, const Element*> by_id;
  for (const Element& e : got) by_id[e.id] = &e;
  for (const Element& e : expected) {
    auto it = by_id.find(e.id);
    ASSERT_NE(it, by_id.end()) << "missing sample " << e.id.epoch << "/" << e.id.index;
    const Element& g = *it->second;
    EXPECT_EQ(e.members, g.members);
    EXPECT_EQ(e.origin, g.origin);
    ASSERT_EQ(e.tensors.size(), g.tensors.size());
    for (size_t t = 0; t < e.tensors.size(); ++t) {
      EXPECT_TRUE(e.tensors[t].Equals(g.tensors[t]))
          << e.origin << " field " << t << ": " << e.tensors[t].DebugString() << " vs "
          << g.tensors[t].DebugString();
    }
  }
}

}  // namespace sluice::rpc::test

#endif  // SLUICE_RPC_RPC_TEST_UTIL_H_
