#include "sluice/pipeline/source.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/test_util.h"

namespace sluice::pipeline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::TempDir;

TEST(MatchComponentTest, Wildcards) {
  EXPECT_TRUE(MatchComponent("*.jpg", "a.jpg"));
  EXPECT_TRUE(MatchComponent("*.jpg", ".jpg"));
  EXPECT_FALSE(MatchComponent("*.jpg", "a.jpeg"));
  EXPECT_TRUE(MatchComponent("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(MatchComponent("a*b*c", "aXXbYY"));
  EXPECT_TRUE(MatchComponent("?.png", "x.png"));
  EXPECT_FALSE(MatchComponent("?.png", "xy.png"));
  EXPECT_TRUE(MatchComponent("img[0-9].jpg", "img7.jpg"));
  EXPECT_FALSE(MatchComponent("img[0-9].jpg", "imgx.jpg"));
  EXPECT_TRUE(MatchComponent("img[!0-9].jpg", "imgx.jpg"));
  EXPECT_TRUE(MatchComponent("img[^0-9].jpg", "imgx.jpg"));
  EXPECT_FALSE(MatchComponent("img[!0-9].jpg", "img3.jpg"));
  EXPECT_TRUE(MatchComponent("[ab]", "b"));
  EXPECT_TRUE(MatchComponent("[]]", "]"));
  EXPECT_TRUE(MatchComponent("[a", "[a"));  // unclosed bracket: a literal '['
  EXPECT_TRUE(MatchComponent("*", ""));
  EXPECT_TRUE(MatchComponent("exact", "exact"));
  EXPECT_FALSE(MatchComponent("exact", "exact2"));
}

class GlobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* f : {"a/x1.jpg", "a/x2.png", "a/x3.jpg", "b/c/y.jpg", "b/c/d/z.jpg", "top.jpg",
                          ".hidden/h.jpg", "a/.dot.jpg", "b/notes.txt"}) {
      dir_.Write(f);
    }
  }
  std::string P(const std::string& rel) const { return dir_.path() + "/" + rel; }
  std::vector<std::string> Glob(const std::string& rel) const {
    StatusOr<std::vector<std::string>> r = ExpandGlob(P(rel));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<std::string>{};
  }
  TempDir dir_;
};

TEST_F(GlobTest, StarWithinOneFolder) {
  EXPECT_THAT(Glob("*.jpg"), ElementsAre(P("top.jpg")));
  EXPECT_THAT(Glob("a/*.jpg"), ElementsAre(P("a/x1.jpg"), P("a/x3.jpg")));
  EXPECT_THAT(Glob("*/*.png"), ElementsAre(P("a/x2.png")));
}

TEST_F(GlobTest, QuestionMarkAndClasses) {
  EXPECT_THAT(Glob("a/x?.jpg"), ElementsAre(P("a/x1.jpg"), P("a/x3.jpg")));
  EXPECT_THAT(Glob("a/x[12].*"), ElementsAre(P("a/x1.jpg"), P("a/x2.png")));
  EXPECT_THAT(Glob("a/x[!1].*"), ElementsAre(P("a/x2.png"), P("a/x3.jpg")));
  EXPECT_THAT(Glob("[ab]/c/*.jpg"), ElementsAre(P("b/c/y.jpg")));
}

TEST_F(GlobTest, DoubleStarMatchesAnyNumberOfFoldersSorted) {
  EXPECT_THAT(Glob("**/*.jpg"), ElementsAre(P("a/x1.jpg"), P("a/x3.jpg"), P("b/c/d/z.jpg"),
                                            P("b/c/y.jpg"), P("top.jpg")));
  EXPECT_THAT(Glob("b/**/*.jpg"), ElementsAre(P("b/c/d/z.jpg"), P("b/c/y.jpg")));
  // Zero folders: b/c/** includes b/c's own files.
  EXPECT_THAT(Glob("b/c/**/y.jpg"), ElementsAre(P("b/c/y.jpg")));
  // A trailing ** takes every (non-hidden) file below.
  EXPECT_THAT(Glob("b/**"), ElementsAre(P("b/c/d/z.jpg"), P("b/c/y.jpg"), P("b/notes.txt")));
  // Repeated ** does not duplicate.
  EXPECT_THAT(Glob("b/**/**/z.jpg"), ElementsAre(P("b/c/d/z.jpg")));
}

TEST_F(GlobTest, HiddenOnlyWhenAskedFor) {
  EXPECT_THAT(Glob("a/.*.jpg"), ElementsAre(P("a/.dot.jpg")));
  EXPECT_THAT(Glob(".hidden/*.jpg"), ElementsAre(P(".hidden/h.jpg")));
  for (const std::string& p : Glob("**/*")) EXPECT_THAT(p, ::testing::Not(HasSubstr("/.")));
}

TEST_F(GlobTest, LiteralPath) {
  EXPECT_THAT(Glob("b/notes.txt"), ElementsAre(P("b/notes.txt")));
  // Folders are not files.
  EXPECT_FALSE(ExpandGlob(P("a")).ok());
}

TEST_F(GlobTest, NoMatchNamesThePattern) {
  StatusOr<std::vector<std::string>> r = ExpandGlob(P("**/*.webp"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(P("**/*.webp")));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no files match"));
  EXPECT_FALSE(ExpandGlob(P("missing/*.jpg")).ok());
  EXPECT_FALSE(ExpandGlob("").ok());
}

TEST_F(GlobTest, ResolveConcatenatesPatternsInOrderWithoutDuplicates) {
  SourceSpec spec;
  spec.files = {P("top.jpg"), P("a/*.jpg"), P("**/*.jpg")};
  StatusOr<SourceFiles> r = ResolveSource(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->paths, ElementsAre(P("top.jpg"), P("a/x1.jpg"), P("a/x3.jpg"), P("b/c/d/z.jpg"),
                                    P("b/c/y.jpg")));
  EXPECT_TRUE(r->labels.empty());
}

TEST_F(GlobTest, ResolveFailsOnAnyPatternWithoutMatches) {
  SourceSpec spec;
  spec.files = {P("a/*.jpg"), P("nothing/*.jpg")};
  StatusOr<SourceFiles> r = ResolveSource(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(P("nothing/*.jpg")));
}

TEST(ResolveSourceTest, NeedsFilesOrManifestNotBoth) {
  SourceSpec spec;
  EXPECT_EQ(ResolveSource(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.files = {"x"};
  spec.manifest = "y";
  EXPECT_EQ(ResolveSource(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ResolveSourceTest, RelativePatternsAreRelativeToTheWorkingDirectory) {
  TempDir dir;
  dir.Write("sub/one.bin");
  std::filesystem::path old = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  StatusOr<std::vector<std::string>> r = ExpandGlob("sub/*.bin");
  StatusOr<std::vector<std::string>> none = ExpandGlob("sub/*.none");
  std::filesystem::current_path(old);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("sub/one.bin"));
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("relative to"));
}

TEST(ManifestTest, PathsRelativeToTheManifestFolderCommentsAndBlanksSkipped) {
  TempDir dir;
  std::string abs = dir.Write("elsewhere/abs.jpg");
  std::string manifest = dir.Write("lists/train.txt",
                                   "# training set\n"
                                   "\n"
                                   "cats/1.jpg\n"
                                   "  dogs/2.jpg  \n"
                                   "   # indented comment\n" +
                                       abs + "\n");
  SourceSpec spec;
  spec.manifest = manifest;
  spec.label = LabelMode::kParentDir;
  StatusOr<SourceFiles> r = ResolveSource(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  std::string base = dir.path() + "/lists/";
  EXPECT_THAT(r->paths, ElementsAre(base + "cats/1.jpg", base + "dogs/2.jpg", abs));
  EXPECT_THAT(r->class_names, ElementsAre("cats", "dogs", "elsewhere"));
  EXPECT_THAT(r->labels, ElementsAre(0, 1, 2));
}

TEST(ManifestTest, MissingOrEmptyManifestIsAClearError) {
  TempDir dir;
  SourceSpec spec;
  spec.manifest = dir.path() + "/nope.txt";
  StatusOr<SourceFiles> r = ResolveSource(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nope.txt"));
  spec.manifest = dir.Write("empty.txt", "# nothing\n\n");
  r = ResolveSource(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("lists no files"));
}

TEST(LabelTest, SortedDistinctParentFolderNamesGiveClassIndices) {
  TempDir dir;
  for (const char* f : {"zebra/1.jpg", "ant/2.jpg", "ant/3.jpg", "moth/4.jpg", "zebra/5.jpg"}) {
    dir.Write(f);
  }
  SourceSpec spec;
  spec.files = {dir.path() + "/*/*.jpg"};
  spec.label = LabelMode::kParentDir;
  StatusOr<SourceFiles> r = ResolveSource(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->class_names, ElementsAre("ant", "moth", "zebra"));
  // Paths sorted: ant/2, ant/3, moth/4, zebra/1, zebra/5.
  EXPECT_THAT(r->labels, ElementsAre(0, 0, 1, 2, 2));
}

TEST(EpochOrderTest, UnshuffledIsTheIdentity) {
  EXPECT_THAT(EpochOrder(4, false, 7, 3), ElementsAre(0, 1, 2, 3));
}

TEST(EpochOrderTest, ShuffledIsAPermutationThatDiffersAcrossEpochsAndIsReproducible) {
  const uint64_t n = 1000;
  std::vector<uint64_t> e0 = EpochOrder(n, true, 42, 0);
  std::vector<uint64_t> e1 = EpochOrder(n, true, 42, 1);
  std::vector<uint64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(e0, identity);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, EpochOrder(n, true, 42, 0));
  EXPECT_NE(e0, EpochOrder(n, true, 43, 0));
}

TEST(EpochOrderTest, ShardOrderPermutesWholeShardsAndKeepsEachInOrder) {
  // Five shards of uneven sizes: [0,3) [3,4) [4,9) [9,12) [12,20).
  const std::vector<uint64_t> groups = {0, 3, 4, 9, 12};
  const uint64_t n = 20;
  auto shard_of = [&](uint64_t i) {
    return static_cast<size_t>(std::upper_bound(groups.begin(), groups.end(), i) -
                               groups.begin()) - 1;
  };
  std::set<std::vector<size_t>> shard_orders;
  for (uint32_t epoch = 0; epoch < 6; ++epoch) {
    std::vector<uint64_t> order = EpochOrder(n, true, 42, epoch, groups);
    std::vector<uint64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> identity(n);
    std::iota(identity.begin(), identity.end(), 0);
    ASSERT_EQ(sorted, identity) << "epoch " << epoch;
    // Each shard's samples are consecutive and ascending: a new shard starts only at its
    // first sample.
    std::vector<size_t> shards;
    for (size_t p = 0; p < order.size(); ++p) {
      if (p > 0 && shard_of(order[p]) == shard_of(order[p - 1])) {
        EXPECT_EQ(order[p], order[p - 1] + 1) << "epoch " << epoch << " position " << p;
      } else {
        EXPECT_EQ(order[p], groups[shard_of(order[p])]) << "epoch " << epoch;
        shards.push_back(shard_of(order[p]));
      }
    }
    EXPECT_EQ(shards.size(), groups.size());
    shard_orders.insert(shards);
    EXPECT_EQ(order, EpochOrder(n, true, 42, epoch, groups));
  }
  EXPECT_GE(shard_orders.size(), 3u);  // the order changes from epoch to epoch
  // Unshuffled, groups change nothing; a count short of the last group cuts it.
  EXPECT_EQ(EpochOrder(5, false, 42, 0, groups), EpochOrder(5, false, 42, 0));
  std::vector<uint64_t> cut = EpochOrder(10, true, 7, 0, groups);
  std::sort(cut.begin(), cut.end());
  EXPECT_THAT(cut, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST(EpochOrderTest, ShardGroupsStartWhereTheShardChanges) {
  SourceFiles files;
  files.paths = {"a.tar", "a.tar", "b.tar", "c.tar", "c.tar", "c.tar"};
  files.spans.resize(files.paths.size());
  EXPECT_THAT(ShardGroups(files, 6), ElementsAre(0, 2, 3));
  EXPECT_THAT(ShardGroups(files, 3), ElementsAre(0, 2));
  SourceSpec spec;
  spec.shuffle = true;
  EXPECT_TRUE(ShuffleGroups(spec, files, 6).empty());  // samples, not shards
  spec.shard_order = true;
  EXPECT_THAT(ShuffleGroups(spec, files, 6), ElementsAre(0, 2, 3));
  files.spans.clear();  // loose files have no shards
  EXPECT_TRUE(ShardGroups(files, 6).empty());
}

using testing_util::FakeFiles;

TEST(SourceIteratorTest, EmitsPathLabelIdAndOriginForEveryEpoch) {
  SourceOptions o;
  o.epochs = 2;
  o.with_label = true;
  std::atomic<int64_t> produced{0};
  o.produced = &produced;
  SourceIterator it(FakeFiles(3, true), o);
  EXPECT_EQ(it.schema().ToString(), "{path: bytes[?], label: i64[]}");
  std::vector<Element> all = testing_util::Drain(it);
  ASSERT_EQ(all.size(), 6u);
  for (size_t i = 0; i < all.size(); ++i) {
    const Element& e = all[i];
    EXPECT_EQ(e.id, (SampleId{static_cast<uint32_t>(i / 3), i % 3}));
    EXPECT_EQ(e.origin, absl::StrCat("/data/", (i % 3) % 2 ? "odd" : "even", "/", i % 3, ".jpg"));
    ASSERT_EQ(e.tensors.size(), 2u);
    EXPECT_EQ(e.tensors[0].bytes(), e.origin);
    EXPECT_EQ(e.tensors[1].rank(), 0);
    EXPECT_EQ(e.tensors[1].scalar_int(), static_cast<int64_t>((i % 3) % 2));
  }
  EXPECT_EQ(produced.load(), 6);
  // End of stream is sticky.
  Element e;
  bool eos = false;
  ASSERT_TRUE(it.GetNext(&e, &eos).ok());
  EXPECT_TRUE(eos);
  ASSERT_TRUE(it.GetNext(&e, &eos).ok());
  EXPECT_TRUE(eos);
}

TEST(SourceIteratorTest, ShuffleVisitsEachEpochsPermutation) {
  SourceOptions o;
  o.epochs = 3;
  o.shuffle = true;
  o.seed = 9;
  SourceIterator it(FakeFiles(50, false), o);
  EXPECT_EQ(it.schema().ToString(), "{path: bytes[?]}");
  std::vector<Element> all = testing_util::Drain(it);
  ASSERT_EQ(all.size(), 150u);
  for (uint32_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<uint64_t> order = EpochOrder(50, true, 9, epoch);
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(all[epoch * 50 + i].id, (SampleId{epoch, order[i]}));
    }
  }
}

TEST(SourceIteratorTest, TakeLimitsEachEpochToTheFirstFiles) {
  SourceOptions o;
  o.epochs = 2;
  o.take = 3;
  o.shuffle = true;
  o.seed = 1;
  auto files = FakeFiles(10, false);
  EXPECT_EQ(SamplesPerEpoch(*files, 3), 3);
  EXPECT_EQ(SamplesPerEpoch(*files, 30), 10);
  EXPECT_EQ(SamplesPerEpoch(*files, -1), 10);
  SourceIterator it(files, o);
  std::vector<Element> all = testing_util::Drain(it);
  ASSERT_EQ(all.size(), 6u);
  for (uint32_t epoch = 0; epoch < 2; ++epoch) {
    std::set<uint64_t> seen;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(all[epoch * 3 + i].id.epoch, epoch);
      seen.insert(all[epoch * 3 + i].id.index);
    }
    EXPECT_EQ(seen, (std::set<uint64_t>{0, 1, 2}));
  }
}

TEST(SourceIteratorTest, ForeverKeepsGoingAndTakeZeroEnds) {
  SourceOptions o;
  o.epochs = -1;
  SourceIterator it(FakeFiles(2, false), o);
  for (int i = 0; i < 101; ++i) {
    Element e;
    bool eos = true;
    ASSERT_TRUE(it.GetNext(&e, &eos).ok());
    ASSERT_FALSE(eos);
    EXPECT_EQ(e.id, (SampleId{static_cast<uint32_t>(i / 2), static_cast<uint64_t>(i % 2)}));
  }
  o.take = 0;
  SourceIterator empty(FakeFiles(2, false), o);
  EXPECT_TRUE(testing_util::Drain(empty).empty());
}

TEST(SourceIteratorTest, CancelMakesGetNextReturnCancelled) {
  SourceIterator it(FakeFiles(2, false), SourceOptions{});
  it.Cancel();
  Element e;
  bool eos = false;
  EXPECT_TRUE(absl::IsCancelled(it.GetNext(&e, &eos)));
}

}  // namespace
}  // namespace sluice::pipeline

namespace sluice::pipeline {
namespace {

using testing_util::FakeFiles;

TEST(SourceProgressTest, BitsRoundTripLeastSignificantFirst) {
  std::vector<bool> bits(11, false);
  bits[0] = bits[3] = bits[8] = bits[10] = true;
  const std::string bytes = SourceProgress::BitsToBytes(bits);
  ASSERT_EQ(bytes.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), 0b00001001);
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), 0b00000101);
  std::vector<bool> back = SourceProgress::BitsFromBytes(bytes);
  ASSERT_EQ(back.size(), 16u);
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i], i < bits.size() && bits[i]) << i;
  SourceProgress p;
  p.first_epoch = 2;
  p.consumed[2] = bits;
  EXPECT_TRUE(p.Consumed(SampleId{1, 5}));
  EXPECT_TRUE(p.Consumed(SampleId{2, 3}));
  EXPECT_FALSE(p.Consumed(SampleId{2, 4}));
  EXPECT_FALSE(p.Consumed(SampleId{2, 40}));
  EXPECT_FALSE(p.Consumed(SampleId{3, 0}));
}

TEST(SourceIteratorTest, ResumeSkipsConsumedSamplesAndFinishedEpochs) {
  SourceOptions full;
  full.epochs = 4;
  full.shuffle = true;
  full.seed = 5;
  SourceIterator reference(FakeFiles(10, false), full);
  std::vector<Element> all = testing_util::Drain(reference);
  ASSERT_EQ(all.size(), 40u);

  auto progress = std::make_shared<SourceProgress>();
  progress->first_epoch = 1;
  progress->consumed[1] = std::vector<bool>(10, false);
  progress->consumed[1][2] = progress->consumed[1][7] = true;
  progress->consumed[2] = std::vector<bool>(10, false);
  progress->consumed[2][0] = true;
  SourceOptions resumed = full;
  resumed.resume = progress;
  SourceIterator it(FakeFiles(10, false), resumed);
  std::vector<Element> rest = testing_util::Drain(it);
  std::vector<SampleId> expected;
  for (const Element& e : all) {
    if (!progress->Consumed(e.id)) expected.push_back(e.id);
  }
  ASSERT_EQ(expected.size(), 27u);  // epochs 1 (8 left), 2 (9 left) and 3 (10)
  ASSERT_EQ(rest.size(), expected.size());
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].id, expected[i]) << i;
}

}  // namespace
}  // namespace sluice::pipeline
