#include "sluice/pipeline/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

namespace sluice::pipeline {
namespace {

using ops::ArgSchema;
using ops::ArgType;
using ops::ArgValue;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

// A registry of stand-ins for the image ops, with fixed schemas, so that the messages below
// do not move when a built-in op gains an argument. The ops are never built.
ops::OpDef FakeOp(std::string name, std::vector<ArgSchema> args) {
  ops::OpDef def;
  def.schema.name = std::move(name);
  def.schema.args = std::move(args);
  def.factory = [](const ops::OpSchema&, const ops::Args&,
                   const Schema&) -> StatusOr<std::unique_ptr<ops::Op>> {
    return absl::UnimplementedError("not built in this test");
  };
  return def;
}

ArgSchema Arg(std::string name, ArgType type, std::optional<ArgValue> default_value,
              int list_length = -1) {
  ArgSchema arg;
  arg.name = std::move(name);
  arg.type = type;
  arg.default_value = std::move(default_value);
  arg.list_length = list_length;
  return arg;
}

const ops::Registry& TestRegistry() {
  static const ops::Registry* const registry = [] {
    auto* r = new ops::Registry;
    ArgSchema p = Arg("p", ArgType::kFloat, 0.5);
    p.min = 0;
    p.max = 1;
    ArgSchema layout = Arg("layout", ArgType::kString, std::string("HWC"));
    layout.choices = {"HWC", "CHW"};
    for (ops::OpDef def : {
             FakeOp("read_file", {}),
             FakeOp("decode_jpeg", {Arg("fancy_upsampling", ArgType::kBool, true)}),
             FakeOp("random_resized_crop",
                    {Arg("size", ArgType::kIntList, std::nullopt, /*list_length=*/2),
                     Arg("scale", ArgType::kFloatList, std::vector<double>{0.08, 1.0},
                         /*list_length=*/2)}),
             FakeOp("random_flip", {p}),
             FakeOp("normalize", {Arg("mean", ArgType::kFloatList, std::nullopt, 3),
                                  Arg("std", ArgType::kFloatList, std::nullopt, 3), layout}),
             FakeOp("tokenize", {Arg("vocab", ArgType::kString, std::string("")),
                                 Arg("max_len", ArgType::kInt, int64_t{0})}),
         }) {
      EXPECT_TRUE(r->Register(std::move(def)).ok());
    }
    return r;
  }();
  return *registry;
}

// The message a user sees for `text` (test registry), or "OK".
std::string ErrorOf(const std::string& text) {
  StatusOr<PipelineSpec> spec = ParseSpec(text, "pipe.yaml", TestRegistry());
  if (spec.ok()) return "OK";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(Sv(spec.status().message()));
}

PipelineSpec ParseOrDie(const std::string& text, const ops::Registry& registry = TestRegistry()) {
  StatusOr<PipelineSpec> spec = ParseSpec(text, "pipe.yaml", registry);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : PipelineSpec();
}

constexpr char kMinimal[] = "source: {files: data/*.jpg}\n";

// ------------------------------------------------------------------------------------------
// Valid specs.

constexpr char kFullYaml[] = R"(# the example of the design document
source:
  files: "data/train/**/*.jpg"
  label: parent_dir
  shuffle: true
  seed: 42
ops:
  - read_file
  - decode_jpeg: {}
  - random_resized_crop: {size: [224, 224], scale: [0.08, 1.0]}
  - random_flip: {p: 0.5}
  - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], layout: CHW}
batch: {size: 64, drop_remainder: true}
shuffle_buffer: 128
prefetch: 2
epochs: -1
take: 1000
options: {deterministic: true, threads: 3, on_error: skip}
)";

constexpr char kFullJson[] = R"({
  "take": 1000, "epochs": -1, "prefetch": 2, "shuffle_buffer": 128,
  "options": {"on_error": "skip", "threads": 3, "deterministic": true},
  "batch": {"drop_remainder": true, "size": 64},
  "ops": [
    "read_file",
    {"decode_jpeg": {}},
    {"random_resized_crop": {"scale": [0.08, 1.0], "size": [224, 224]}},
    {"random_flip": {"p": 0.5}},
    {"normalize": {"layout": "CHW", "std": [0.229, 0.224, 0.225],
                   "mean": [0.485, 0.456, 0.406]}}
  ],
  "source": {"seed": 42, "shuffle": true, "label": "parent_dir",
             "files": ["data/train/**/*.jpg"]}
})";

TEST(ParseSpecTest, FullYamlHasEveryField) {
  PipelineSpec spec = ParseOrDie(kFullYaml);
  EXPECT_EQ(spec.source.files, std::vector<std::string>{"data/train/**/*.jpg"});
  EXPECT_EQ(spec.source.manifest, "");
  EXPECT_EQ(spec.source.label, LabelMode::kParentDir);
  EXPECT_TRUE(spec.source.shuffle);
  EXPECT_EQ(spec.source.seed, 42u);
  ASSERT_EQ(spec.ops.size(), 5u);
  EXPECT_EQ(spec.ops[0].name, "read_file");
  EXPECT_TRUE(spec.ops[0].args.empty());
  EXPECT_EQ(spec.ops[1].name, "decode_jpeg");
  EXPECT_TRUE(spec.ops[1].args.empty());
  EXPECT_EQ(spec.ops[2].name, "random_resized_crop");
  EXPECT_EQ(spec.ops[2].args.at("size"), ArgValue(std::vector<int64_t>{224, 224}));
  EXPECT_EQ(spec.ops[2].args.at("scale"), ArgValue(std::vector<double>{0.08, 1.0}));
  EXPECT_EQ(spec.ops[3].args.at("p"), ArgValue(0.5));
  EXPECT_EQ(spec.ops[4].args.at("layout"), ArgValue(std::string("CHW")));
  EXPECT_EQ(spec.batch.size, 64);
  EXPECT_TRUE(spec.batch.drop_remainder);
  EXPECT_FALSE(spec.batch.padded);
  EXPECT_EQ(spec.shuffle_buffer, 128);
  EXPECT_EQ(spec.prefetch, 2);
  EXPECT_EQ(spec.epochs, -1);
  EXPECT_EQ(spec.take, 1000);
  EXPECT_TRUE(spec.options.deterministic);
  EXPECT_EQ(spec.options.threads, 3);
  EXPECT_EQ(spec.options.on_error, OnError::kSkip);
}

TEST(ParseSpecTest, JsonSpellingParsesToTheSameSpec) {
  PipelineSpec from_yaml = ParseOrDie(kFullYaml);
  PipelineSpec from_json = ParseOrDie(kFullJson);
  EXPECT_TRUE(from_yaml == from_json);
  EXPECT_EQ(from_yaml.ops[4].args, from_json.ops[4].args);
}

TEST(ParseSpecTest, MinimalSpecGetsTheDefaults) {
  PipelineSpec spec = ParseOrDie(kMinimal);
  EXPECT_EQ(spec.source.files, std::vector<std::string>{"data/*.jpg"});
  EXPECT_EQ(spec.source.label, LabelMode::kNone);
  EXPECT_FALSE(spec.source.shuffle);
  EXPECT_EQ(spec.source.seed, 0u);
  EXPECT_TRUE(spec.ops.empty());
  EXPECT_EQ(spec.batch.size, 0);
  EXPECT_EQ(spec.shuffle_buffer, 0);
  EXPECT_EQ(spec.prefetch, 4);
  EXPECT_EQ(spec.epochs, 1);
  EXPECT_EQ(spec.take, -1);
  EXPECT_FALSE(spec.options.deterministic);
  EXPECT_EQ(spec.options.threads, 0);
  EXPECT_EQ(spec.options.on_error, OnError::kFail);
}

TEST(ParseSpecTest, EmptyOpsListIsAllowed) {
  EXPECT_TRUE(ParseOrDie(std::string(kMinimal) + "ops: []\n").ops.empty());
  EXPECT_TRUE(ParseOrDie(std::string(kMinimal) + "ops:\n").ops.empty());
}

TEST(ParseSpecTest, OpEntrySpellings) {
  PipelineSpec spec = ParseOrDie(std::string(kMinimal) +
                                 "ops:\n"
                                 "  - read_file\n"
                                 "  - \"read_file\"\n"
                                 "  - read_file: {}\n"
                                 "  - read_file: null\n"
                                 "  - read_file:\n"
                                 "  - random_flip:\n"
                                 "      p: 0.25\n");
  ASSERT_EQ(spec.ops.size(), 6u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(spec.ops[i].name, "read_file");
    EXPECT_TRUE(spec.ops[i].args.empty());
  }
  EXPECT_EQ(spec.ops[5].args.at("p"), ArgValue(0.25));
}

TEST(ParseSpecTest, ArgumentsKeepTheirYamlTypes) {
  PipelineSpec spec = ParseOrDie(std::string(kMinimal) +
                                 "ops:\n"
                                 "  - random_flip: {p: 1}\n"
                                 "  - random_flip: {p: 1.0}\n"
                                 "  - random_flip: {p: +.5e0}\n"
                                 "  - normalize: {mean: [1, 2, 3.5], std: [1, 2, 3]}\n"
                                 "  - decode_jpeg: {fancy_upsampling: false}\n"
                                 "  - tokenize: {vocab: \"true\", max_len: 7}\n");
  ASSERT_EQ(spec.ops.size(), 6u);
  EXPECT_EQ(spec.ops[0].args.at("p"), ArgValue(int64_t{1}));  // kept as written
  EXPECT_EQ(spec.ops[1].args.at("p"), ArgValue(1.0));
  EXPECT_EQ(spec.ops[2].args.at("p"), ArgValue(0.5));
  EXPECT_EQ(spec.ops[3].args.at("mean"), ArgValue(std::vector<double>{1, 2, 3.5}));
  EXPECT_EQ(spec.ops[3].args.at("std"), ArgValue(std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(spec.ops[4].args.at("fancy_upsampling"), ArgValue(false));
  EXPECT_EQ(spec.ops[5].args.at("vocab"), ArgValue(std::string("true")));  // quoted
  EXPECT_EQ(spec.ops[5].args.at("max_len"), ArgValue(int64_t{7}));
  // A plain 12 is an int, which a string argument does not take.
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops:\n  - tokenize: {vocab: 12}\n"),
            "pipe.yaml:3:23: ops[0].tokenize.vocab: expected a string, got 12");
}

TEST(ParseSpecTest, SourceSpellings) {
  PipelineSpec list =
      ParseOrDie("source: {files: [a/*.jpg, \"b c.jpg\"], seed: 18446744073709551615}");
  EXPECT_EQ(list.source.files, (std::vector<std::string>{"a/*.jpg", "b c.jpg"}));
  EXPECT_EQ(list.source.seed, 18446744073709551615u);
  PipelineSpec manifest = ParseOrDie("source:\n  manifest: train.txt\n  label: none\n");
  EXPECT_TRUE(manifest.source.files.empty());
  EXPECT_EQ(manifest.source.manifest, "train.txt");
}

// `even` is written into the canonical form only when it is `pad`, so the fingerprints of
// specs written before it existed stay as they were.
TEST(ParseSpecTest, EvenIsDropUnlessPadAndOnlyPadIsWritten) {
  PipelineSpec plain = ParseOrDie("source: {files: a.jpg}\n");
  PipelineSpec drop = ParseOrDie("source: {files: a.jpg, even: drop}\n");
  PipelineSpec pad = ParseOrDie("source: {files: a.jpg, even: pad}\n");
  EXPECT_EQ(plain.source.even, EvenRule::kDrop);
  EXPECT_EQ(pad.source.even, EvenRule::kPad);
  EXPECT_TRUE(plain == drop);
  EXPECT_FALSE(plain == pad);
  EXPECT_EQ(Fingerprint(plain), Fingerprint(drop));
  EXPECT_NE(Fingerprint(plain), Fingerprint(pad));
  EXPECT_THAT(ToCanonicalJson(plain), Not(HasSubstr("even")));
  EXPECT_THAT(ToCanonicalJson(pad), HasSubstr(R"("even":"pad")"));
  EXPECT_TRUE(ParseOrDie(ToCanonicalJson(pad)) == pad);
  EXPECT_TRUE(ParseOrDie(ToYaml(pad)) == pad);
  EXPECT_EQ(ErrorOf("source: {files: a.jpg, even: round}\n"),
            "pipe.yaml:1:30: source.even: must be one of drop, pad; got \"round\"");
}

TEST(ParseSpecTest, PaddedBatch) {
  PipelineSpec spec = ParseOrDie(std::string(kMinimal) +
                                 "padded_batch: {size: 8, padding_value: -1, "
                                 "padding_values: {tokens: 3.5, mask: 0}}\n");
  EXPECT_EQ(spec.batch.size, 8);
  EXPECT_TRUE(spec.batch.padded);
  EXPECT_FALSE(spec.batch.drop_remainder);
  EXPECT_EQ(spec.batch.padding_value, -1.0);
  EXPECT_EQ(spec.batch.padding_values,
            (std::map<std::string, double>{{"mask", 0}, {"tokens", 3.5}}));
}

TEST(ParseSpecTest, ThreadsAuto) {
  EXPECT_EQ(ParseOrDie(std::string(kMinimal) + "options: {threads: auto}").options.threads, 0);
  EXPECT_EQ(ParseOrDie(std::string(kMinimal) + "options: {threads: 1}").options.threads, 1);
}

// ------------------------------------------------------------------------------------------
// Every class of error, with the message a user sees.

TEST(SpecErrorTest, YamlSyntaxError) {
  EXPECT_EQ(ErrorOf("source: {files: [a.jpg, b.jpg}\n"),
            "pipe.yaml:1:30: YAML syntax error: illegal flow end");
  EXPECT_EQ(ErrorOf("source:\n  files: a.jpg\n\tops: []\n"),
            "pipe.yaml:3:1: YAML syntax error: illegal tab when looking for indentation");
}

TEST(SpecErrorTest, TopLevelNotAMap) {
  EXPECT_EQ(ErrorOf("- read_file\n- decode_jpeg\n"),
            "pipe.yaml:1:1: expected a map at the top level (source, ops, batch, ...), got a list");
  EXPECT_EQ(ErrorOf("just words"),
            "pipe.yaml:1:1: expected a map at the top level (source, ops, batch, ...), got "
            "\"just words\"");
  EXPECT_EQ(ErrorOf(""), "pipe.yaml:1:1: the spec is empty; it needs at least a 'source' key");
  EXPECT_EQ(ErrorOf("# only a comment\n"),
            "pipe.yaml:1:1: the spec is empty; it needs at least a 'source' key");
}

TEST(SpecErrorTest, UnknownTopLevelKeySuggestsTheNearest) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "shufle_buffer: 100\n"),
            "pipe.yaml:2:1: shufle_buffer: unknown key, did you mean 'shuffle_buffer'? (known "
            "keys: source, ops, batch, padded_batch, shuffle_buffer, prefetch, epochs, take, "
            "options)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "model: resnet50\n"),
            "pipe.yaml:2:1: model: unknown key (known keys: source, ops, batch, padded_batch, "
            "shuffle_buffer, prefetch, epochs, take, options)");
}

TEST(SpecErrorTest, UnknownKeyInsideASection) {
  EXPECT_EQ(ErrorOf("source:\n  files: a.jpg\n  shuffel: true\n"),
            "pipe.yaml:3:3: source.shuffel: unknown key, did you mean 'shuffle'? (known keys: "
            "files, manifest, shards, data, label, shuffle, seed, even)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: 4, drop_last: true}\n"),
            "pipe.yaml:2:18: batch.drop_last: unknown key (known keys: size, drop_remainder)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: 4, padding_value: 0}\n"),
            "pipe.yaml:2:18: batch.padding_value: unknown key (known keys: size, "
            "drop_remainder)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "options: {thread: 4}\n"),
            "pipe.yaml:2:11: options.thread: unknown key, did you mean 'threads'? (known keys: "
            "deterministic, threads, on_error, max_image_pixels, max_file_bytes)");
}

TEST(SpecErrorTest, DuplicateKey) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "prefetch: 2\nprefetch: 3\n"),
            "pipe.yaml:3:1: prefetch: duplicate key");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops: [random_flip: {p: 0.1, p: 0.2}]\n"),
            "pipe.yaml:2:29: ops[0].random_flip.p: duplicate key");
}

TEST(SpecErrorTest, WrongScalarType) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: sixty}\n"),
            "pipe.yaml:2:15: batch.size: expected an int, got \"sixty\"");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: 64.0}\n"),
            "pipe.yaml:2:15: batch.size: expected an int, got 64.0");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: \"64\"}\n"),
            "pipe.yaml:2:15: batch.size: expected an int, got \"64\"");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "prefetch:\n"),
            "pipe.yaml:2:1: prefetch: expected an int, got null");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "take: [1, 2]\n"),
            "pipe.yaml:2:7: take: expected an int, got a list");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "epochs: 99999999999999999999\n"),
            "pipe.yaml:2:9: epochs: integer out of range: 99999999999999999999");
  EXPECT_EQ(ErrorOf("source: {files: a.jpg, shuffle: yes}\n"),
            "pipe.yaml:1:33: source.shuffle: expected true, false or shards, got \"yes\"");
  EXPECT_EQ(ErrorOf("source: {files: a.jpg, seed: -1}\n"),
            "pipe.yaml:1:30: source.seed: must be >= 0, got -1");
  EXPECT_EQ(ErrorOf("source: {files: {a: 1}}\n"),
            "pipe.yaml:1:17: source.files: expected a path or glob, or a list of them, got a map");
  EXPECT_EQ(ErrorOf("source: {files: [a.jpg, [b.jpg]]}\n"),
            "pipe.yaml:1:25: source.files[1]: expected a string, got a list");
  EXPECT_EQ(
      ErrorOf(std::string(kMinimal) + "options: {threads: many}\n"),
      "pipe.yaml:2:20: options.threads: expected \"auto\" or an int in [1, 1024], got \"many\"");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "padded_batch: {size: 2, padding_value: zero}\n"),
            "pipe.yaml:2:40: padded_batch.padding_value: expected a number, got \"zero\"");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: 64\n"),
            "pipe.yaml:2:8: batch: expected a map {size: N, drop_remainder: BOOL}, got 64");
}

// The upper bounds (SpecLimits): a hostile or mistyped value is an error naming the field,
// not a huge allocation or thousands of threads later.
TEST(SpecErrorTest, OverTheUpperBound) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: 100000000}\n"),
            "pipe.yaml:2:15: batch.size: must be in [1, 65536], got 100000000");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "padded_batch: {size: 65537}\n"),
            "pipe.yaml:2:22: padded_batch.size: must be in [1, 65536], got 65537");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "prefetch: 1025\n"),
            "pipe.yaml:2:11: prefetch: must be in [0, 1024], got 1025");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "shuffle_buffer: 9223372036854775807\n"),
            "pipe.yaml:2:17: shuffle_buffer: must be in [0, 16777216], got 9223372036854775807");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "epochs: 4294967296\n"),
            "pipe.yaml:2:9: epochs: must be in [1, 1048576], or -1 to repeat forever, got "
            "4294967296");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "take: 1099511627777\n"),
            "pipe.yaml:2:7: take: must be in [0, 1099511627776], or -1 for all samples, got "
            "1099511627777");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "options: {threads: 100000}\n"),
            "pipe.yaml:2:20: options.threads: must be \"auto\" or an int in [1, 1024], got 100000");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "padded_batch: {size: 2, padding_value: .nan}\n"),
            "pipe.yaml:2:40: padded_batch.padding_value: must be a finite number in [-1e+38, "
            "1e+38], got .nan");
  EXPECT_EQ(
      ErrorOf(std::string(kMinimal) + "padded_batch: {size: 2, padding_values: {audio: -.inf}}\n"),
      "pipe.yaml:2:49: padded_batch.padding_values.audio: must be a finite number in "
      "[-1e+38, 1e+38], got -.inf");
  // The largest accepted values read back.
  StatusOr<PipelineSpec> spec = ParseSpec(
      std::string(kMinimal) +
          "batch: {size: 65536}\nprefetch: 1024\nshuffle_buffer: 16777216\nepochs: 1048576\n"
          "options: {threads: 1024}\n",
      "pipe.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch.size, 65536);
  EXPECT_EQ(spec->options.threads, 1024);
}

// A spec built in code, not read from text, is checked by CheckSpecRanges (Loader and
// LocalExecutor call it).
TEST(SpecErrorTest, CheckSpecRangesOnASpecBuiltInCode) {
  PipelineSpec spec;
  spec.source.files = {"a.jpg"};
  EXPECT_TRUE(CheckSpecRanges(spec).ok());
  spec.batch.size = int64_t{1} << 40;
  EXPECT_EQ(CheckSpecRanges(spec).message(),
            "batch.size: must be in [1, 65536], got 1099511627776");
  spec.batch.size = 8;
  spec.options.threads = 5000;
  EXPECT_EQ(CheckSpecRanges(spec).message(), "options.threads: must be in [1, 1024], got 5000");
  spec.options.threads = 0;
  spec.batch.padded = true;
  spec.batch.padding_values["x"] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(CheckSpecRanges(spec).message(),
            "padded_batch.padding_values.x: must be a finite number in [-1e+38, 1e+38], got .inf");
}

TEST(SpecErrorTest, OutOfRange) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: 0}\n"),
            "pipe.yaml:2:15: batch.size: must be in [1, 65536], got 0");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "prefetch: -1\n"),
            "pipe.yaml:2:11: prefetch: must be in [0, 1024], got -1");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "shuffle_buffer: -5\n"),
            "pipe.yaml:2:17: shuffle_buffer: must be in [0, 16777216], got -5");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "take: -2\n"),
            "pipe.yaml:2:7: take: must be in [0, 1099511627776], or -1 for all samples, got -2");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "epochs: 0\n"),
            "pipe.yaml:2:9: epochs: must be in [1, 1048576], or -1 to repeat forever, got 0");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "options: {threads: 0}\n"),
            "pipe.yaml:2:20: options.threads: must be \"auto\" or an int in [1, 1024], got 0");
  EXPECT_EQ(ErrorOf("source: {files: \"\"}\n"), "pipe.yaml:1:17: source.files: must not be empty");
  EXPECT_EQ(ErrorOf("source: {files: []}\n"),
            "pipe.yaml:1:17: source.files: must list at least one path or pattern");
}

TEST(SpecErrorTest, MissingSource) {
  EXPECT_EQ(ErrorOf("ops: [read_file]\nbatch: {size: 2}\n"),
            "pipe.yaml:1:1: source: missing; a spec needs a source with 'files', 'manifest' or "
            "'shards'");
  EXPECT_EQ(ErrorOf("source: data/*.jpg\n"),
            "pipe.yaml:1:9: source: expected a map with 'files', 'manifest' or 'shards', got "
            "\"data/*.jpg\"");
}

TEST(SpecErrorTest, SourceNeedsExactlyOneOfFilesAndManifest) {
  EXPECT_EQ(ErrorOf("source:\n  shuffle: true\n"),
            "pipe.yaml:2:3: source: needs 'files' (a path or glob, or a list of them), "
            "'manifest' or 'shards'");
  EXPECT_EQ(ErrorOf("source:\n  files: a.jpg\n  manifest: list.txt\n"),
            "pipe.yaml:3:3: source: has both 'files' and 'manifest'; give only one of 'files', "
            "'manifest' and 'shards'");
  EXPECT_EQ(ErrorOf("source:\n  shards: s.tar\n  files: a.jpg\n"),
            "pipe.yaml:3:3: source: has both 'shards' and 'files'; give only one of 'files', "
            "'manifest' and 'shards'");
}

TEST(SpecErrorTest, ShardsNeedTheirDataMemberAndMemberLabels) {
  EXPECT_EQ(ErrorOf("source: {shards: s.tar}\n"),
            "pipe.yaml:1:9: source: with 'shards' needs 'data': the member field holding each "
            "sample's data (e.g. data: jpg)");
  EXPECT_EQ(ErrorOf("source: {shards: s.tar, data: j/pg}\n"),
            "pipe.yaml:1:31: source.data: 'j/pg' is not a member field (letters, digits, '.', "
            "'_', '-', e.g. jpg)");
  EXPECT_EQ(ErrorOf("source: {shards: s.tar, data: jpg, label: parent_dir}\n"),
            "pipe.yaml:1:43: source.label: parent_dir is for 'files' and 'manifest'; a shard "
            "sample's label comes from a member (e.g. label: cls)");
  EXPECT_EQ(ErrorOf("source: {files: a.jpg, data: jpg}\n"),
            "pipe.yaml:1:24: source: 'data' is for 'shards' only");
}

// `spec` read back from its canonical JSON and from its YAML is `spec`.
void ExpectRoundTrips(const PipelineSpec& spec) {
  StatusOr<PipelineSpec> from_json = ParseSpec(ToCanonicalJson(spec), "canonical.json");
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(*from_json, spec);
  StatusOr<PipelineSpec> from_yaml = ParseSpec(ToYaml(spec), "spec.yaml");
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
  EXPECT_EQ(*from_yaml, spec);
}

TEST(ParseSpecTest, ShardsRoundTripThroughJsonAndYaml) {
  StatusOr<PipelineSpec> spec = ParseSpec(
      "source: {shards: [\"s-{000..003}.tar\", \"extra.tar\"], data: jpg, label: \"json:class\"}\n"
      "ops: [read_file]\n",
      "pipe.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->source.shards.size(), 2u);
  EXPECT_EQ(spec->source.data, "jpg");
  EXPECT_EQ(spec->source.label, LabelMode::kMember);
  EXPECT_EQ(spec->source.label_member, "json:class");
  ExpectRoundTrips(*spec);
}

TEST(ParseSpecTest, ShuffleShardsKeepsShardsWholeAndRoundTrips) {
  StatusOr<PipelineSpec> spec =
      ParseSpec("source: {shards: s.tar, data: jpg, shuffle: shards}\nshuffle_buffer: 100\n",
                "pipe.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->source.shuffle);
  EXPECT_TRUE(spec->source.shard_order);
  ExpectRoundTrips(*spec);
  PipelineSpec samples = ParseOrDie("source: {shards: s.tar, data: jpg, shuffle: true}\n");
  EXPECT_FALSE(samples.source.shard_order);
  EXPECT_NE(ToCanonicalJson(samples), ToCanonicalJson(*spec));
  EXPECT_EQ(ErrorOf("source: {files: a.jpg, shuffle: shards}\n"),
            "pipe.yaml:1:33: source.shuffle: 'shards' (shard order) is for a 'shards' source; "
            "files and a manifest take true or false");
  EXPECT_EQ(ErrorOf("source: {files: a.jpg, shuffle: sometimes}\n"),
            "pipe.yaml:1:33: source.shuffle: expected true, false or shards, got \"sometimes\"");
}

TEST(SpecErrorTest, BadEnumValueListsTheAcceptedOnes) {
  EXPECT_EQ(ErrorOf("source: {files: a.jpg, label: folder}\n"),
            "pipe.yaml:1:31: source.label: a member label is for 'shards' only (files take "
            "none or parent_dir)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "options: {on_error: ignore}\n"),
            "pipe.yaml:2:21: options.on_error: must be one of fail, skip; got \"ignore\"");
}

TEST(SpecErrorTest, BatchAndPaddedBatchTogether) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {size: 4}\npadded_batch: {size: 4}\n"),
            "pipe.yaml:3:1: padded_batch: cannot be combined with 'batch'; give one of batch or "
            "padded_batch");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "batch: {drop_remainder: true}\n"),
            "pipe.yaml:2:8: batch.size: missing; the number of samples per batch");
}

TEST(SpecErrorTest, OpEntryMustBeANameOrAOneKeyMap) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops:\n  - read_file\n  - {random_flip: {}, "
                                            "decode_jpeg: {}}\n"),
            "pipe.yaml:4:5: ops[1]: expected an op name or a one-key map {op_name: {args}}, got "
            "a map with 2 keys");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops:\n  - [read_file]\n"),
            "pipe.yaml:3:5: ops[0]: expected an op name or a one-key map {op_name: {args}}, got "
            "a list");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops: {read_file: {}}\n"),
            "pipe.yaml:2:6: ops: expected a list of ops, got a map");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops:\n  - random_flip: 0.5\n"),
            "pipe.yaml:3:18: ops[0].random_flip: expected a map of arguments, got 0.5");
}

TEST(SpecErrorTest, UnknownOpComesWithTheRegistrysSuggestion) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops:\n  - read_file\n  - decode_jepg: {}\n"),
            "pipe.yaml:4:5: ops[1]: unknown op 'decode_jepg' (did you mean 'decode_jpeg'?); "
            "`sluice ops` lists the available ops");
}

TEST(SpecErrorTest, OpArgumentErrorsNameTheOpAndTheArgument) {
  std::string head = std::string(kMinimal) + "ops:\n  - read_file\n  - decode_jpeg\n";
  // Line 5, the third op.
  EXPECT_EQ(ErrorOf(head + "  - random_resized_crop: {size: [224, 224, 3]}\n"),
            "pipe.yaml:5:33: ops[2].random_resized_crop.size: expected 2 ints, got 3 "
            "([224,224,3])");
  EXPECT_EQ(ErrorOf(head + "  - random_resized_crop: {scale: [0.5, 1.0]}\n"),
            "pipe.yaml:5:26: ops[2].random_resized_crop.size: missing required argument (2 ints)");
  EXPECT_EQ(ErrorOf(head + "  - random_resized_crop\n"),
            "pipe.yaml:5:5: ops[2].random_resized_crop.size: missing required argument (2 ints)");
  EXPECT_EQ(ErrorOf(head + "  - random_resized_crop:\n"),
            "pipe.yaml:5:5: ops[2].random_resized_crop.size: missing required argument (2 ints)");
  EXPECT_EQ(ErrorOf(head + "  - random_flip: {prob: 0.5}\n"),
            "pipe.yaml:5:19: ops[2].random_flip.prob: unknown argument (valid: p)");
  EXPECT_EQ(ErrorOf(head + "  - random_flip: {p: 1.5}\n"),
            "pipe.yaml:5:22: ops[2].random_flip.p: must be in [0, 1], got 1.5");
  EXPECT_EQ(ErrorOf(head + "  - normalize: {mean: [1, 2, 3], std: [1, 2, 3], layout: CWH}\n"),
            "pipe.yaml:5:58: ops[2].normalize.layout: expected one of HWC, CHW, got \"CWH\"");
}

TEST(SpecErrorTest, ArgumentValuesThatAreNotScalarsOrNumberLists) {
  std::string head = std::string(kMinimal) + "ops:\n";
  EXPECT_EQ(ErrorOf(head + "  - random_resized_crop: {size: {h: 1, w: 2}}\n"),
            "pipe.yaml:3:33: ops[0].random_resized_crop.size: expected a number, a bool, a "
            "string or a list of numbers, got a map");
  EXPECT_EQ(ErrorOf(head + "  - random_resized_crop: {size: [224, wide]}\n"),
            "pipe.yaml:3:39: ops[0].random_resized_crop.size[1]: lists of arguments hold "
            "numbers only, got \"wide\"");
  EXPECT_EQ(ErrorOf(head + "  - random_flip: {p: }\n"),
            "pipe.yaml:3:19: ops[0].random_flip.p: expected a number, a bool, a string or a "
            "list of numbers, got null");
}

// Found by fuzz/spec_fuzz.cc (fuzz/regressions/spec/non_utf8_glob.yaml): a string that is
// not UTF-8 was accepted, and its canonical JSON (what a worker receives) carried U+FFFD
// instead of its bytes, so the worker read a different glob.
TEST(SpecErrorTest, TextThatIsNotUtf8) {
  EXPECT_EQ(ErrorOf("source: {files: \"data/im\xff\xff.jpg\"}\n"),
            "pipe.yaml:1:17: not UTF-8 text: \"data/im\\xff\\xff.jpg\"");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "ops: [\"\xc3\x28\"]\n"),  // a cut sequence
            "pipe.yaml:2:7: not UTF-8 text: \"\\xc3(\"");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "\xed\xa0\x80: 1\n"),  // an encoded surrogate
            "pipe.yaml:2:1: not UTF-8 text: \"\\xed\\xa0\\x80\"");
  // UTF-8 text, and escapes that YAML turns into UTF-8, are fine.
  PipelineSpec spec = ParseOrDie("source: {files: [\"d\xc3\xa9j\xc3\xa0/*.jpg\", \"\\xff.jpg\"]}\n");
  EXPECT_EQ(spec.source.files,
            (std::vector<std::string>{"d\xc3\xa9j\xc3\xa0/*.jpg", "\xc3\xbf.jpg"}));
  EXPECT_EQ(ParseOrDie(ToCanonicalJson(spec)), spec);
}

TEST(SpecErrorTest, FilenameDefaultsWhenEmpty) {
  StatusOr<PipelineSpec> spec = ParseSpec("[]", "", TestRegistry());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            "<spec>:1:1: expected a map at the top level (source, ops, batch, ...), got a list");
}

// ------------------------------------------------------------------------------------------
// Canonical form, YAML output, fingerprint and equality.

TEST(CanonicalJsonTest, SortedCompleteAndCompact) {
  PipelineSpec spec = ParseOrDie("source: {files: [a.jpg]}\nbatch: {size: 2}\n");
  EXPECT_EQ(ToCanonicalJson(spec),
            R"({"batch":{"drop_remainder":false,"size":2},"epochs":1,)"
            R"("ops":[],"options":{"deterministic":false,"on_error":"fail","threads":"auto"},)"
            R"("prefetch":4,"shuffle_buffer":0,)"
            R"("source":{"files":["a.jpg"],"label":"none","seed":0,"shuffle":false},"take":-1})");
  PipelineSpec padded = ParseOrDie(
      "source: {manifest: m.txt}\npadded_batch: {size: 2, padding_values: {t: -1}}\n"
      "options: {threads: 2}\n");
  EXPECT_EQ(ToCanonicalJson(padded),
            R"({"epochs":1,"ops":[],"options":{"deterministic":false,"on_error":"fail",)"
            R"("threads":2},"padded_batch":{"drop_remainder":false,"padding_value":0.0,)"
            R"("padding_values":{"t":-1.0},"size":2},"prefetch":4,"shuffle_buffer":0,)"
            R"("source":{"label":"none","manifest":"m.txt","seed":0,"shuffle":false},"take":-1})");
  PipelineSpec unbatched = ParseOrDie(kMinimal);
  EXPECT_THAT(ToCanonicalJson(unbatched), HasSubstr(R"({"batch":null,"epochs":1,)"));
}

// Canonical JSON holds the arguments bound by the built-in registry, so it is read back with
// that registry.
TEST(CanonicalJsonTest, RoundTripsThroughParseSpec) {
  const ops::Registry& builtin = ops::Registry::Builtin();
  for (const char* text : {kFullYaml, kFullJson, kMinimal}) {
    PipelineSpec spec = ParseOrDie(text, builtin);
    std::string json = ToCanonicalJson(spec);
    PipelineSpec again = ParseOrDie(json, builtin);
    EXPECT_TRUE(again == spec) << json;
    EXPECT_EQ(ToCanonicalJson(again), json);
  }
  PipelineSpec padded = ParseOrDie(std::string(kMinimal) +
                                   "padded_batch: {size: 3, drop_remainder: true, "
                                   "padding_value: 0.25, padding_values: {tokens: -1}}\n");
  EXPECT_TRUE(ParseOrDie(ToCanonicalJson(padded)) == padded);
}

TEST(ToYamlTest, RoundTripsThroughParseSpec) {
  for (const char* text : {kFullYaml, kFullJson, kMinimal}) {
    PipelineSpec spec = ParseOrDie(text);
    std::string yaml = ToYaml(spec);
    PipelineSpec again = ParseOrDie(yaml);
    EXPECT_TRUE(again == spec) << yaml;
    // The arguments come back as written, with the same types.
    for (size_t i = 0; i < spec.ops.size(); ++i) EXPECT_EQ(again.ops[i].args, spec.ops[i].args);
  }
}

TEST(ToYamlTest, IsReadable) {
  PipelineSpec spec = ParseOrDie(kFullYaml);
  EXPECT_EQ(ToYaml(spec),
            "source:\n"
            "  files: [\"data/train/**/*.jpg\"]\n"
            "  label: parent_dir\n"
            "  shuffle: true\n"
            "  seed: 42\n"
            "ops:\n"
            "  - read_file\n"
            "  - decode_jpeg\n"
            "  - random_resized_crop: {scale: [0.08, 1.0], size: [224, 224]}\n"
            "  - random_flip: {p: 0.5}\n"
            "  - normalize: {layout: CHW, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, "
            "0.225]}\n"
            "batch: {size: 64, drop_remainder: true}\n"
            "shuffle_buffer: 128\n"
            "prefetch: 2\n"
            "epochs: -1\n"
            "take: 1000\n"
            "options: {deterministic: true, threads: 3, on_error: skip}\n");
}

TEST(ToYamlTest, QuotesStringsThatWouldReadAsSomethingElse) {
  PipelineSpec spec;
  spec.source.files = {"*.jpg", "a: b", "say \"hi\"\n"};
  spec.source.seed = 7;
  spec.ops.push_back(OpSpec{"tokenize", {{"vocab", std::string("true")}}});
  spec.ops.push_back(OpSpec{"tokenize", {{"vocab", std::string("12")}}});
  spec.ops.push_back(OpSpec{"tokenize", {{"vocab", std::string("")}}});
  spec.ops.push_back(OpSpec{"tokenize", {{"vocab", std::string("words.txt")}}});
  spec.ops.push_back(OpSpec{
      "normalize",
      {{"mean", std::vector<double>{1, 2, 3}}, {"std", std::vector<double>{1e-300, 1e300, -0.1}}}});
  spec.batch.size = 3;
  spec.batch.padded = true;
  spec.batch.padding_values = {{"odd key", 1.0}};
  PipelineSpec again = ParseOrDie(ToYaml(spec));
  EXPECT_EQ(again.source.files, spec.source.files);
  ASSERT_EQ(again.ops.size(), spec.ops.size());
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    EXPECT_EQ(again.ops[i].args, spec.ops[i].args) << ToYaml(spec);
  }
  EXPECT_TRUE(again == spec);
}

TEST(FingerprintTest, IsFnv1aOfTheCanonicalJson) {
  PipelineSpec spec = ParseOrDie("source: {files: [a.jpg]}\nbatch: {size: 2}\n");
  // FNV-1a 64 of the canonical string asserted in CanonicalJsonTest, computed separately.
  EXPECT_EQ(Fingerprint(spec), "db4bdb6494edac53");
  EXPECT_THAT(Fingerprint(ParseOrDie(kFullYaml)), MatchesRegex("[0-9a-f]{16}"));
}

TEST(FingerprintTest, SameForEquivalentSpellings) {
  // Key order, flow or block style, JSON or YAML, defaults written out or left away.
  PipelineSpec a = ParseOrDie("source: {files: data/*.jpg}\nbatch: {size: 8}\nops: [read_file]\n");
  PipelineSpec b = ParseOrDie(
      "ops:\n  - read_file: {}\nbatch:\n  drop_remainder: false\n  size: 8\n"
      "options: {threads: auto, on_error: fail, deterministic: false}\n"
      "source:\n  seed: 0\n  shuffle: false\n  label: none\n  files: [data/*.jpg]\n"
      "prefetch: 4\nepochs: 1\ntake: -1\nshuffle_buffer: 0\n");
  PipelineSpec c = ParseOrDie(R"({"source": {"files": "data/*.jpg"}, "batch": {"size": 8},
                                  "ops": [{"read_file": null}]})");
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a == c);
  EXPECT_EQ(Fingerprint(a), Fingerprint(b));
  EXPECT_EQ(Fingerprint(a), Fingerprint(c));
}

TEST(FingerprintTest, DiffersWhenAnythingChanges) {
  const std::string base = Fingerprint(ParseOrDie(kFullYaml));
  auto changed = [](std::string from, std::string to) {
    std::string text = kFullYaml;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    return Fingerprint(ParseOrDie(text));
  };
  EXPECT_NE(changed("{p: 0.5}", "{p: 0.25}"), base);
  EXPECT_NE(changed("size: [224, 224]", "size: [224, 192]"), base);
  EXPECT_NE(changed("layout: CHW", "layout: HWC"), base);
  EXPECT_NE(changed("[0.485, 0.456, 0.406]", "[0.485, 0.456, 0.407]"), base);
  EXPECT_NE(changed("  - decode_jpeg: {}\n", ""), base);
  EXPECT_NE(changed("size: 64", "size: 32"), base);
  EXPECT_NE(changed("seed: 42", "seed: 43"), base);
  EXPECT_NE(changed("on_error: skip", "on_error: fail"), base);
  EXPECT_NE(changed("take: 1000", "take: 999"), base);
}

// The canonical form binds arguments against the built-in registry, so an op's defaults
// count as written. Uses whatever defaults the built-in ops declare.
TEST(FingerprintTest, BuiltinDefaultsSpelledOutOrNotAreEqual) {
  const ops::Registry& builtin = ops::Registry::Builtin();
  int checked = 0;
  for (const std::string& name : builtin.Names()) {
    const ops::OpSchema& schema = builtin.Find(name)->schema;
    OpSpec bare{name, {}};
    OpSpec spelled{name, {}};
    bool all_defaults = true;
    for (const ArgSchema& arg : schema.args) {
      if (!arg.default_value)
        all_defaults = false;
      else
        spelled.args[arg.name] = *arg.default_value;
    }
    if (!all_defaults || spelled.args.empty()) continue;
    PipelineSpec a, b;
    a.source.files = b.source.files = {"x"};
    a.ops = {bare};
    b.ops = {spelled};
    EXPECT_TRUE(a == b) << name;
    EXPECT_EQ(ToCanonicalJson(a), ToCanonicalJson(b)) << name;
    EXPECT_EQ(Fingerprint(a), Fingerprint(b)) << name;
    // Both spellings parse, and back from canonical JSON to the same spec.
    EXPECT_TRUE(ParseOrDie(ToYaml(b), builtin) == a) << ToYaml(b);
    EXPECT_TRUE(ParseOrDie(ToCanonicalJson(a), builtin) == b) << ToCanonicalJson(a);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no built-in op has only defaulted arguments";
}

TEST(FingerprintTest, RandomFlipDefaultProbability) {
  const ops::Registry& builtin = ops::Registry::Builtin();
  const ArgSchema* p = builtin.Find("random_flip")->schema.FindArg("p");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->default_value, ArgValue(0.5));
  auto fingerprint = [&](const std::string& op) {
    return Fingerprint(ParseOrDie(std::string(kMinimal) + "ops:\n  - " + op + "\n", builtin));
  };
  const std::string bare = fingerprint("random_flip");
  EXPECT_EQ(fingerprint("random_flip: {}"), bare);
  EXPECT_EQ(fingerprint("random_flip: {p: 0.5}"), bare);
  EXPECT_EQ(fingerprint("random_flip: {p: 5e-1}"), bare);
  EXPECT_NE(fingerprint("random_flip: {p: 0.25}"), bare);
  EXPECT_EQ(fingerprint("random_flip: {p: 1}"), fingerprint("random_flip: {p: 1.0}"));
}

TEST(SpecErrorTest, BuiltinArgumentErrorPointsAtTheValue) {
  StatusOr<PipelineSpec> spec = ParseSpec(std::string(kMinimal) +
                                              "ops:\n  - read_file\n  - decode_jpeg\n"
                                              "  - random_resized_crop: {size: [224, 224, 3]}\n",
                                          "pipe.yaml", ops::Registry::Builtin());
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(Sv(spec.status().message())),
              ::testing::StartsWith("pipe.yaml:5:33: ops[2].random_resized_crop.size: "));
}

TEST(FingerprintTest, BuiltinArgumentChangeChangesTheFingerprint) {
  const ops::Registry& builtin = ops::Registry::Builtin();
  int checked = 0;
  for (const std::string& name : builtin.Names()) {
    const ops::OpSchema& schema = builtin.Find(name)->schema;
    for (const ArgSchema& arg : schema.args) {
      if (!arg.default_value || arg.type != ArgType::kBool) continue;
      PipelineSpec a, b;
      a.source.files = b.source.files = {"x"};
      a.ops = {OpSpec{name, {}}};
      b.ops = {OpSpec{name, {{arg.name, !std::get<bool>(*arg.default_value)}}}};
      EXPECT_FALSE(a == b) << name << "." << arg.name;
      EXPECT_NE(Fingerprint(a), Fingerprint(b)) << name << "." << arg.name;
      ++checked;
    }
  }
  // Not every registry has a bool argument; the test registry's ops cover the rest above.
  SUCCEED() << checked << " bool arguments checked";
}

TEST(EqualityTest, ComparesEveryField) {
  PipelineSpec base = ParseOrDie(kFullYaml);
  auto differs = [&](auto mutate) {
    PipelineSpec other = base;
    mutate(other);
    return !(other == base);
  };
  EXPECT_TRUE(base == base);
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.source.files.push_back("more"); }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.source.manifest = "m"; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.source.label = LabelMode::kNone; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.source.shuffle = false; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.source.seed = 1; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.ops.pop_back(); }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.ops[0].name = "other"; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.ops[3].args["p"] = 0.75; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.batch.size = 1; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.batch.drop_remainder = false; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.batch.padded = true; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.batch.padding_value = 1; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.batch.padding_values["x"] = 1; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.shuffle_buffer = 0; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.prefetch = 0; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.epochs = 1; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.take = -1; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.options.deterministic = false; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.options.threads = 0; }));
  EXPECT_TRUE(differs([](PipelineSpec& s) { s.options.on_error = OnError::kFail; }));
}

// ------------------------------------------------------------------------------------------
// LoadSpec.

class LoadSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "spec_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& file : files_) std::remove(file.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(LoadSpecTest, MissingFileIsNotFound) {
  std::string path = dir_ + "/absent.yaml";
  StatusOr<PipelineSpec> spec = LoadSpec(path, TestRegistry());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(spec.status().message(),
            "cannot read pipeline spec '" + path + "': No such file or directory");
}

TEST_F(LoadSpecTest, ReadsAFileAndNamesItInErrors) {
  std::string good = Write("good.yaml", kFullYaml);
  StatusOr<PipelineSpec> spec = LoadSpec(good, TestRegistry());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(*spec == ParseOrDie(kFullYaml));

  std::string bad = Write("bad.yaml", "source: {files: a.jpg}\nprefetch: lots\n");
  spec = LoadSpec(bad, TestRegistry());
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), bad + ":2:11: prefetch: expected an int, got \"lots\"");
}

}  // namespace
}  // namespace sluice::pipeline

namespace sluice::pipeline {
namespace {

// The op trait, not the op's name: read_file reads the sample; read_box reads a file too,
// but a sidecar, so read=local cannot start with it.
TEST(FirstOpReadsSampleTest, FollowsTheOpSchemaTrait) {
  PipelineSpec spec;
  EXPECT_FALSE(FirstOpReadsSample(spec));
  spec.ops = {{"read_file", {}}, {"decode_jpeg", {}}};
  EXPECT_TRUE(FirstOpReadsSample(spec));
  spec.ops = {{"read_box", {}}, {"read_file", {}}};
  EXPECT_FALSE(FirstOpReadsSample(spec));
  spec.ops = {{"no_such_op", {}}};
  EXPECT_FALSE(FirstOpReadsSample(spec));
}

}  // namespace
}  // namespace sluice::pipeline
