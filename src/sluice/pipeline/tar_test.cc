#include "sluice/pipeline/tar.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/pipeline/local_executor.h"
#include "sluice/pipeline/source.h"
#include "sluice/pipeline/spec.h"
#include "sluice/pipeline/test_util.h"

namespace sluice::pipeline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::TempDir;

ReadAt FromString(const std::string& tar) {
  return [&tar](int64_t offset, int64_t n) -> StatusOr<std::string> {
    if (offset >= static_cast<int64_t>(tar.size())) return std::string();
    return tar.substr(static_cast<size_t>(offset), static_cast<size_t>(n));
  };
}

std::string Tar(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string tar;
  for (const auto& [name, data] : members) EXPECT_TRUE(AppendTarMember(&tar, name, data).ok());
  AppendTarEnd(&tar);
  return tar;
}

TEST(TarTest, ScansMembersWithTheirDataRanges) {
  const std::string tar = Tar(
      {{"a/0001.jpg", "JPEGDATA"}, {"a/0001.cls", "3"}, {"a/0002.jpg", std::string(1000, 'x')}});
  StatusOr<TarScan> scan = ScanTar("t.tar", static_cast<int64_t>(tar.size()), FromString(tar));
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(scan->problem, "");
  ASSERT_EQ(scan->members.size(), 3u);
  EXPECT_EQ(scan->members[0].name, "a/0001.jpg");
  EXPECT_EQ(tar.substr(scan->members[0].offset, scan->members[0].size), "JPEGDATA");
  EXPECT_EQ(tar.substr(scan->members[1].offset, scan->members[1].size), "3");
  EXPECT_EQ(scan->members[2].size, 1000);
}

TEST(TarTest, ReadsWhatTheSystemTarWritesWithLongNamesInGnuAndPaxFormats) {
  TempDir dir;
  const std::string long_dir(120, 'd');
  dir.Write("in/" + long_dir + "/k1.jpg", "one");
  dir.Write("in/" + long_dir + "/k1.cls", "7");
  for (const char* format : {"gnu", "pax"}) {
    const std::string out = dir.path() + "/" + format + ".tar";
    const std::string cmd = "tar --format=" + std::string(format) + " -C " + dir.path() +
                            "/in -cf " + out + " --sort=name " + long_dir;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out, std::ios::binary);
    std::stringstream buf;
    buf << f.rdbuf();
    const std::string tar = buf.str();
    StatusOr<TarScan> scan = ScanTar(out, static_cast<int64_t>(tar.size()), FromString(tar));
    ASSERT_TRUE(scan.ok()) << scan.status();
    EXPECT_EQ(scan->problem, "") << format;
    std::vector<ShardSample> samples = GroupSamples(scan->members);
    ASSERT_EQ(samples.size(), 1u) << format;
    EXPECT_EQ(samples[0].key, long_dir + "/k1");
    const ShardField* jpg = samples[0].Find("jpg");
    ASSERT_NE(jpg, nullptr);
    EXPECT_EQ(tar.substr(jpg->offset, jpg->size), "one");
  }
}

TEST(TarTest, ATruncatedShardKeepsTheMembersBeforeTheCutAndSaysWhere) {
  const std::string whole =
      Tar({{"k1.jpg", std::string(600, 'a')}, {"k2.jpg", std::string(600, 'b')}});
  const std::string cut = whole.substr(0, 512 + 1024 + 512 + 100);  // into k2's data
  StatusOr<TarScan> scan = ScanTar("s.tar", static_cast<int64_t>(cut.size()), FromString(cut));
  ASSERT_TRUE(scan.ok());
  ASSERT_EQ(scan->members.size(), 1u);
  EXPECT_EQ(scan->members[0].name, "k1.jpg");
  EXPECT_THAT(scan->problem, HasSubstr("s.tar: truncated"));
  EXPECT_THAT(scan->problem, HasSubstr("offset 1536"));
}

TEST(TarTest, GarbageOrAHostileSizeIsAProblemNotACrash) {
  std::string tar = Tar({{"k1.jpg", "abc"}, {"k2.jpg", "def"}});
  std::string garbage = tar;
  garbage[1024 + 10] ^= 0x55;  // k2's header: the checksum no longer holds
  StatusOr<TarScan> scan =
      ScanTar("g.tar", static_cast<int64_t>(garbage.size()), FromString(garbage));
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->members.size(), 1u);
  EXPECT_THAT(scan->problem, HasSubstr("not a tar header at offset 1024"));

  // A size of 8 GiB - 1 in a header whose checksum holds: over the file, so truncated.
  std::string huge;
  ASSERT_TRUE(AppendTarMember(&huge, "big.jpg", "").ok());
  huge.replace(124, 11, "77777777777");
  int64_t sum = 0;
  huge.replace(148, 8, "        ");
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(huge[i]);
  char cks[8];
  std::snprintf(cks, sizeof(cks), "%06llo", static_cast<long long>(sum));
  huge.replace(148, 6, cks);
  AppendTarEnd(&huge);
  scan = ScanTar("h.tar", static_cast<int64_t>(huge.size()), FromString(huge));
  ASSERT_TRUE(scan.ok());
  EXPECT_TRUE(scan->members.empty());
  EXPECT_THAT(scan->problem, HasSubstr("truncated"));
}

TEST(TarTest, GroupsMembersIntoSamplesByKeyAsWebDatasetDoes) {
  std::vector<TarMember> members = {{"a/0001.jpg", 0, 1}, {"a/0001.seg.png", 0, 1},
                                    {"a/0002.jpg", 0, 1}, {"a/.hidden.jpg", 0, 1},
                                    {"a/noext", 0, 1},    {"a/0002.cls", 0, 1}};
  std::vector<ShardSample> samples = GroupSamples(members);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].key, "a/0001");
  ASSERT_EQ(samples[0].fields.size(), 2u);
  EXPECT_EQ(samples[0].fields[1].field, "seg.png");
  EXPECT_EQ(samples[1].key, "a/0002");
  EXPECT_EQ(samples[1].fields.size(), 2u);
}

TEST(TarTest, ExpandsBraceRangesAndLists) {
  StatusOr<std::vector<std::string>> r = ExpandBraces("s-{008..011}.tar");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, ElementsAre("s-008.tar", "s-009.tar", "s-010.tar", "s-011.tar"));
  r = ExpandBraces("{train,val}-{0..1}.tar");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(*r, ElementsAre("train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar"));
  EXPECT_THAT(ExpandBraces("s-{3..1}.tar").status().message(), HasSubstr("runs backwards"));
  EXPECT_THAT(ExpandBraces("s-{1..3.tar").status().message(), HasSubstr("unclosed"));
  EXPECT_THAT(ExpandBraces("s-{0..99999999}.tar").status().message(), HasSubstr("2^20"));
}

TEST(TarTest, AnIndexRoundTripsWithSmallMembersInlineAndRejectsDamage) {
  const std::string tar = Tar({{"k1.jpg", std::string(300, 'a')}, {"k1.cls", "7"},
                               {"k2.jpg", "bb"}, {"k2.json", "{\"class\": 3}"}});
  StatusOr<TarScan> scan = ScanTar("t.tar", static_cast<int64_t>(tar.size()), FromString(tar));
  ASSERT_TRUE(scan.ok());
  StatusOr<std::string> text = WriteTarIndex(static_cast<int64_t>(tar.size()), *scan, FromString(tar));
  ASSERT_TRUE(text.ok()) << text.status();
  StatusOr<TarIndex> index = ParseTarIndex("t.tar.idx", *text);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->shard_size, static_cast<int64_t>(tar.size()));
  ASSERT_EQ(index->scan.members.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(index->scan.members[i].name, scan->members[i].name);
    EXPECT_EQ(index->scan.members[i].offset, scan->members[i].offset);
    EXPECT_EQ(index->scan.members[i].size, scan->members[i].size);
  }
  EXPECT_EQ(index->inline_bytes[0], "");  // 300 bytes: read from the shard
  EXPECT_EQ(index->inline_bytes[1], "7");
  EXPECT_EQ(index->inline_bytes[3], "{\"class\": 3}");
  EXPECT_THAT(ParseTarIndex("x.idx", "garbage\n").status().message(),
              HasSubstr("x.idx:1: not a sluice-tar-index 1 header"));
  EXPECT_THAT(ParseTarIndex("x.idx", "sluice-tar-index 1 100\n90\t20\t-\tk.jpg\n")
                  .status()
                  .message(),
              HasSubstr("x.idx:2: not a member line"));
}

TEST(TarTest, AStaleIndexIsRefusedNamingTheFix) {
  TempDir dir;
  const std::string tar = Tar({{"k1.jpg", "abc"}, {"k1.cls", "1"}});
  const std::string shard = dir.Write("s.tar", tar);
  StatusOr<TarScan> indexed = WriteLocalShardIndex(shard);
  ASSERT_TRUE(indexed.ok()) << indexed.status();
  SourceSpec spec;
  spec.shards = {shard};
  spec.data = "jpg";
  spec.label = LabelMode::kMember;
  spec.label_member = "cls";
  StatusOr<SourceFiles> files = ResolveSource(spec);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->labels, std::vector<int64_t>{1});
  dir.Write("s.tar", Tar({{"k1.jpg", "abcdef"}, {"k1.cls", "1"}, {"k2.jpg", "x"}}));
  EXPECT_THAT(ResolveSource(spec).status().message(), HasSubstr("run `sluice index` on it again"));
}

// The same data as loose files (class folders) and as shards written in the loose files'
// order: the same samples, labels and bytes in the same order for the same seed.
class ShardSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The loose files, and shards of them in the order the files resolve (sorted paths):
    // four samples per shard, two in the last.
    std::vector<std::pair<std::string, int>> keys;
    for (int i = 0; i < 10; ++i) {
      const std::string key = "class_" + std::to_string(i % 3) + "/img_" + std::to_string(100 + i);
      dir_.Write("files/" + key + ".jpg", "image-" + std::to_string(i));
      keys.emplace_back(key, i);
    }
    std::sort(keys.begin(), keys.end());
    std::string tar;
    int shard = 0;
    for (size_t n = 0; n < keys.size(); ++n) {
      const auto& [key, i] = keys[n];
      ASSERT_TRUE(AppendTarMember(&tar, key + ".jpg", "image-" + std::to_string(i)).ok());
      ASSERT_TRUE(AppendTarMember(&tar, key + ".cls", std::to_string(i % 3)).ok());
      if (n % 4 == 3 || n + 1 == keys.size()) {
        AppendTarEnd(&tar);
        dir_.Write("shards/s-00" + std::to_string(shard++) + ".tar", tar);
        tar.clear();
      }
    }
  }

  PipelineSpec Spec(bool shards, OnError on_error = OnError::kFail) const {
    PipelineSpec spec;
    if (shards) {
      spec.source.shards = {dir_.path() + "/shards/s-{000..002}.tar"};
      spec.source.data = "jpg";
      spec.source.label = LabelMode::kMember;
      spec.source.label_member = "cls";
    } else {
      spec.source.files = {dir_.path() + "/files/**/*.jpg"};
      spec.source.label = LabelMode::kParentDir;
    }
    spec.source.shuffle = true;
    spec.source.seed = 7;
    spec.ops = {OpSpec{"read_file", {}}};
    spec.options.deterministic = true;
    spec.options.on_error = on_error;
    return spec;
  }

  // (data, label) in delivery order.
  std::vector<std::pair<std::string, int64_t>> Run(const PipelineSpec& spec, Status* status,
                                                   int64_t* skipped = nullptr) const {
    std::vector<std::pair<std::string, int64_t>> out;
    StatusOr<std::unique_ptr<LocalExecutor>> ex = LocalExecutor::Create(spec);
    if (!ex.ok()) {
      *status = ex.status();
      return out;
    }
    const Schema& schema = (*ex)->output_schema();
    const int data = schema.IndexOf("data");
    const int label = schema.IndexOf("label");
    while (true) {
      Element e;
      bool end = false;
      *status = (*ex)->GetNext(&e, &end);
      if (!status->ok() || end) break;
      out.emplace_back(std::string(e.tensors[data].bytes()), e.tensors[label].data<int64_t>()[0]);
    }
    if (skipped != nullptr) *skipped = (*ex)->stats().skipped();
    return out;
  }

  // Under on_error: fail the run stops with `message`; under skip it delivers `kept` samples
  // and counts one skipped.
  void ExpectFailsOrSkipsOne(const std::string& message, size_t kept) const {
    Status status;
    Run(Spec(true), &status);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(message));
    int64_t skipped = 0;
    const auto got = Run(Spec(true, OnError::kSkip), &status, &skipped);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(got.size(), kept);
    EXPECT_EQ(skipped, 1);
  }

  TempDir dir_;
};

TEST_F(ShardSourceTest, ShardsGiveTheSameSamplesInTheSameOrderAsLooseFiles) {
  Status files_status, shards_status;
  const auto files = Run(Spec(false), &files_status);
  const auto shards = Run(Spec(true), &shards_status);
  ASSERT_TRUE(files_status.ok()) << files_status;
  ASSERT_TRUE(shards_status.ok()) << shards_status;
  ASSERT_EQ(files.size(), 10u);
  EXPECT_EQ(shards, files);
}

// A checkpoint taken mid-shard (state_dict's progress): the resumed source visits exactly the
// samples not received, under the same ids, each with its own shard member.
TEST_F(ShardSourceTest, AResumeMidShardVisitsExactlyTheSamplesNotReceived) {
  StatusOr<SourceFiles> files = ResolveSource(Spec(true).source);
  ASSERT_TRUE(files.ok()) << files.status();
  auto shared = std::make_shared<const SourceFiles>(*std::move(files));
  SourceOptions full;
  full.epochs = 2;
  full.shuffle = true;
  full.seed = 7;
  full.with_label = true;
  SourceIterator reference(shared, full);
  const std::vector<Element> all = testing_util::Drain(reference);
  ASSERT_EQ(all.size(), 20u);
  auto progress = std::make_shared<SourceProgress>();
  progress->consumed[0] = std::vector<bool>(10, false);
  progress->consumed[0][1] = progress->consumed[0][5] = progress->consumed[0][6] = true;
  SourceOptions resumed = full;
  resumed.resume = progress;
  SourceIterator it(shared, resumed);
  const std::vector<Element> rest = testing_util::Drain(it);
  const int key = it.schema().IndexOf("key");
  const int span = it.schema().IndexOf("span");
  ASSERT_GE(key, 0);
  std::vector<const Element*> expected;
  for (const Element& e : all) {
    if (!progress->Consumed(e.id)) expected.push_back(&e);
  }
  ASSERT_EQ(rest.size(), 17u);
  ASSERT_EQ(rest.size(), expected.size());
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].id, expected[i]->id) << i;
    EXPECT_EQ(rest[i].tensors[key].bytes(), expected[i]->tensors[key].bytes()) << i;
    EXPECT_TRUE(rest[i].tensors[span].Equals(expected[i]->tensors[span])) << i;
  }
}

TEST_F(ShardSourceTest, AMissingMemberFailsNamingShardAndMemberOrIsSkippedAndCounted) {
  std::string tar;
  ASSERT_TRUE(AppendTarMember(&tar, "class_2/img_900.cls", "2").ok());  // no jpg
  ASSERT_TRUE(AppendTarMember(&tar, "class_2/img_901.jpg", "x").ok());
  ASSERT_TRUE(AppendTarMember(&tar, "class_2/img_901.cls", "2").ok());
  AppendTarEnd(&tar);
  dir_.Write("shards/s-002.tar", tar);
  // 8 in the first two shards, one readable here.
  ExpectFailsOrSkipsOne("s-002.tar: sample 'class_2/img_900' has no 'jpg'", 9);
}

TEST_F(ShardSourceTest, ATruncatedShardFailsOrSkipsWhatItLost) {
  std::ifstream f(dir_.path() + "/shards/s-001.tar", std::ios::binary);
  std::stringstream buf;
  buf << f.rdbuf();
  dir_.Write("shards/s-001.tar", buf.str().substr(0, 4 * 1024 + 100));  // two samples left
  ExpectFailsOrSkipsOne("s-001.tar: truncated", 4 + 2 + 2);
}

}  // namespace
}  // namespace sluice::pipeline
