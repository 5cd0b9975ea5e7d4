#include "sluice/core/placement.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// `got` failed with InvalidArgument, and its message says `error`.
template <typename T>
void ExpectInvalid(const StatusOr<T>& got, const std::string& error, const std::string& what) {
  ASSERT_FALSE(got.ok()) << what;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << what;
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(error)) << what;
}

// Every field, each value: a canonical string parses to the placement and prints back as it
// was, and the placement goes through JSON unchanged.
TEST(PlacementTest, CanonicalStringsRoundTripForEveryField) {
  struct Case {
    const char* text;
    Placement want;
  };
  const std::vector<Case> cases = {
      {"fixed:cut=0,ratio=0,read=remote,compress=none", Placement{.cut = 0, .ratio = 0}},
      {"fixed:cut=1,ratio=0.5,read=remote,compress=none", Placement{.cut = 1, .ratio = 0.5}},
      {"fixed:cut=5,ratio=1,read=remote,compress=none", Placement{.cut = 5, .ratio = 1}},
      {"fixed:cut=12,ratio=0.25,read=remote,compress=none", Placement{.cut = 12, .ratio = 0.25}},
      {"fixed:cut=batch,ratio=0.75,read=remote,compress=none",
       Placement{.cut = kCutAfterBatch, .ratio = 0.75}},
      {"fixed:cut=3,ratio=0.9231,read=remote,compress=none", Placement{.cut = 3, .ratio = 0.9231}},
      {"fixed:cut=3,ratio=0.001,read=remote,compress=none", Placement{.cut = 3, .ratio = 0.001}},
      {"fixed:cut=3,ratio=1e-05,read=remote,compress=none", Placement{.cut = 3, .ratio = 1e-5}},
      {"fixed:cut=2,ratio=0.5,read=local,compress=none",
       Placement{.cut = 2, .ratio = 0.5, .read_mode = ReadMode::kLocalRead}},
      {"fixed:cut=2,ratio=0.5,read=remote,compress=lz4",
       Placement{.cut = 2, .ratio = 0.5, .codec = Codec::kLz4}},
      {"fixed:cut=batch,ratio=0.5,read=local,compress=zstd",
       Placement{.cut = kCutAfterBatch,
                 .ratio = 0.5,
                 .read_mode = ReadMode::kLocalRead,
                 .codec = Codec::kZstd}},
      {"fixed:cut=4,ratio=0.9,read=remote,compress=none,spill=workers",
       Placement{.cut = 4, .ratio = 0.9, .local_spill_over = false}},
      {"fixed:cut=4,ratio=0.6,read=remote,compress=none,shares=1/2",
       Placement{.cut = 4, .ratio = 0.6, .worker_shares = {1, 2}}},
      {"fixed:cut=4,ratio=0.6,read=remote,compress=none,shares=0.2/0.4/0",
       Placement{.cut = 4, .ratio = 0.6, .worker_shares = {0.2, 0.4, 0}}},
      {"fixed:cut=batch,ratio=1,read=local,compress=lz4,spill=workers,shares=0.25/0.75",
       Placement{.cut = kCutAfterBatch,
                 .ratio = 1,
                 .worker_shares = {0.25, 0.75},
                 .read_mode = ReadMode::kLocalRead,
                 .codec = Codec::kLz4,
                 .local_spill_over = false}},
  };
  for (const Case& c : cases) {
    StatusOr<Placement> p = ParsePlacement(c.text);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    EXPECT_EQ(*p, c.want) << c.text;
    EXPECT_EQ(PlacementString(*p), c.text);
    StatusOr<Placement> back = PlacementFromJson(PlacementToJson(*p));
    ASSERT_TRUE(back.ok()) << c.text << ": " << back.status();
    EXPECT_EQ(*back, *p) << c.text;
  }
}

// A policy string and what it should give: its canonical form, or an error's words.
struct TextCase {
  const char* text;
  const char* want;
};

TEST(PlacementTest, OtherSpellingsParseToTheCanonicalForm) {
  const std::vector<TextCase> cases = {
      {"fixed:cut=2,ratio=0.5", "fixed:cut=2,ratio=0.5,read=remote,compress=none"},
      {"fixed:ratio=1,cut=0", "fixed:cut=0,ratio=1,read=remote,compress=none"},
      {"fixed:cut=2,ratio=0.50,read=remote_read",
       "fixed:cut=2,ratio=0.5,read=remote,compress=none"},
      {"fixed:read=local_read,cut=2,ratio=.5", "fixed:cut=2,ratio=0.5,read=local,compress=none"},
      {"fixed:cut=2,ratio=0.5,spill=all", "fixed:cut=2,ratio=0.5,read=remote,compress=none"},
      // Equal shares are the default (empty): not printed.
      {"fixed:cut=2,ratio=0.5,shares=1/1/1", "fixed:cut=2,ratio=0.5,read=remote,compress=none"},
      // Four significant digits.
      {"fixed:cut=2,ratio=0.123456", "fixed:cut=2,ratio=0.1235,read=remote,compress=none"},
  };
  for (const TextCase& c : cases) {
    StatusOr<Placement> p = ParsePlacement(c.text);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    EXPECT_EQ(PlacementString(*p), c.want) << c.text;
  }
}

TEST(PlacementTest, ParseErrorsNameTheKey) {
  const std::vector<TextCase> cases = {
      {"cut=2,ratio=0.5", "starts with 'fixed:'"},
      {"fixed:", "not key=value"},
      {"fixed:cut=2,,ratio=0.5", "not key=value"},
      {"fixed:cut=2", "ratio is missing"},
      {"fixed:ratio=0.5", "cut is missing"},
      {"fixed:cut=2,ratio=1.5", "ratio must be a number in [0, 1], got '1.5'"},
      {"fixed:cut=2,ratio=nan", "ratio must be a number in [0, 1]"},
      {"fixed:cut=-1,ratio=0.5", "cut must be an op count or 'batch', got '-1'"},
      {"fixed:cut=two,ratio=0.5", "cut must be"},
      {"fixed:cut=6,ratio=0.5", "cut 6 is past the pipeline's 5 ops (0..5 or batch)"},
      {"fixed:cut=2,ratio=0.5,read=nfs", "read must be local or remote, got 'nfs'"},
      {"fixed:cut=2,ratio=0.5,compress=gzip", "compress must be lz4, zstd or none, got 'gzip'"},
      {"fixed:cut=2,ratio=0.5,spill=trainer", "spill must be all or workers, got 'trainer'"},
      {"fixed:cut=2,ratio=0.5,shares=1/-1", "shares must be numbers >= 0"},
      {"fixed:cut=2,ratio=0.5,shares=1//2", "shares must be numbers >= 0"},
      {"fixed:cut=2,ratio=0.5,shares=inf", "shares must be numbers >= 0"},
      {"fixed:cut=2,ratio=0.5,speed=max", "unknown key 'speed'"},
      {"fixed:cut=2,cut=3,ratio=0.5", "cut given twice"},
  };
  for (const TextCase& c : cases) {
    ExpectInvalid(ParsePlacement(c.text, /*num_ops=*/5), c.want, c.text);
  }
}

TEST(PlacementTest, JsonUsesTheReportFieldNames) {
  const Placement p = Placement{.cut = kCutAfterBatch,
                                .ratio = 0.8,
                                .worker_shares = {0.3, 0.5},
                                .read_mode = ReadMode::kLocalRead,
                                .codec = Codec::kZstd,
                                .local_spill_over = false};
  const nlohmann::json j = PlacementToJson(p, {"a:1", "b:2"});
  EXPECT_EQ(j["cut"], "batch");
  EXPECT_EQ(j["ratio"], 0.8);
  EXPECT_EQ(j["spill"], "workers");
  EXPECT_EQ(j["read_mode"], "local_read");
  EXPECT_EQ(j["compression"], "zstd");
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_EQ(j["workers"][0]["address"], "a:1");
  EXPECT_EQ(j["workers"][1]["share"], 0.5);
  StatusOr<Placement> back = PlacementFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);

  // Addresses without shares: equal shares, and they stay so.
  const nlohmann::json equal = PlacementToJson(Placement{.cut = 3, .ratio = 0.5}, {"a:1", "b:2"});
  EXPECT_FALSE(equal["workers"][0].contains("share"));
  back = PlacementFromJson(equal);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->worker_shares.empty());
  EXPECT_EQ(PlacementToJson(Placement{.cut = 3, .ratio = 0.5})["cut"], 3);
}

TEST(PlacementTest, JsonErrorsNameTheField) {
  using nlohmann::json;
  struct Case {
    json j;
    const char* error;
  };
  const std::vector<Case> cases = {
      {json::array(), "expected an object"},
      {json{{"ratio", 0.5}}, "cut is missing"},
      {json{{"cut", "all"}, {"ratio", 0.5}}, "cut: expected an op count"},
      {json{{"cut", -1}, {"ratio", 0.5}}, "cut: expected an op count"},
      {json{{"cut", 2}}, "ratio: expected a number"},
      {json{{"cut", 2}, {"ratio", 2.0}}, "ratio: expected a number in [0, 1]"},
      {json{{"cut", 2}, {"ratio", 0.5}, {"spill", "none"}}, "spill: expected"},
      {json{{"cut", 2}, {"ratio", 0.5}, {"read_mode", "nfs"}}, "read_mode: unknown read mode"},
      {json{{"cut", 2}, {"ratio", 0.5}, {"compression", 3}}, "compression: expected a string"},
      {json{{"cut", 2}, {"ratio", 0.5}, {"compression", "gzip"}}, "compression: unknown codec"},
      {json{{"cut", 2}, {"ratio", 0.5}, {"workers", 1}}, "workers: expected an array"},
      {json{{"cut", 2}, {"ratio", 0.5}, {"workers", {{{"share", -1}}}}},
       "workers[0].share: expected a number >= 0"},
  };
  for (const Case& c : cases) {
    ExpectInvalid(PlacementFromJson(c.j), c.error, c.j.dump());
  }
}

TEST(PlacementTest, ValidatesAgainstThePipeline) {
  const PipelineShape images{/*num_ops=*/5, /*has_batch=*/true, /*first_op_reads_file=*/true};
  const PipelineShape unbatched{/*num_ops=*/3, /*has_batch=*/false, /*first_op_reads_file=*/false};
  struct Case {
    const char* name;
    Placement placement;
    PipelineShape shape;
    const char* error;  // "" : valid
  };
  const std::vector<Case> cases = {
      {"cut 0", Placement{.cut = 0, .ratio = 0.5}, images, ""},
      {"cut at the end", Placement{.cut = 5, .ratio = 1}, images, ""},
      {"after batch", Placement{.cut = kCutAfterBatch, .ratio = 1}, images, ""},
      {"local read past read_file",
       Placement{.cut = 1, .ratio = 0.5, .read_mode = ReadMode::kLocalRead}, images, ""},
      {"shares", Placement{.cut = 2, .ratio = 0.5, .worker_shares = {0, 1}}, images, ""},
      {"cut past the ops", Placement{.cut = 6, .ratio = 0.5}, images,
       "cut 6 is out of range: the pipeline has 5 ops, so the cut is 0..5 or batch"},
      {"negative cut", Placement{.cut = -3, .ratio = 0.5}, images, "cut -3 is out of range"},
      {"after batch without a batch", Placement{.cut = kCutAfterBatch, .ratio = 0.5}, unbatched,
       "cut=batch needs a pipeline with a batch"},
      {"local read without read_file",
       Placement{.cut = 2, .ratio = 0.5, .read_mode = ReadMode::kLocalRead}, unbatched,
       "read=local needs read_file as the first op"},
      {"local read at cut 0", Placement{.cut = 0, .ratio = 0.5, .read_mode = ReadMode::kLocalRead},
       images, "read=local needs a cut of at least 1"},
      {"ratio over 1", Placement{.cut = 2, .ratio = 1.5}, images,
       "ratio must be in [0, 1]; got 1.5"},
      {"negative ratio", Placement{.cut = 2, .ratio = -0.1}, images, "ratio must be in [0, 1]"},
      {"negative share", Placement{.cut = 2, .ratio = 0.5, .worker_shares = {1, -1}}, images,
       "worker shares must be >= 0"},
  };
  for (const Case& c : cases) {
    const Status s = ValidatePlacement(c.placement, c.shape);
    if (std::string(c.error).empty()) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
    } else {
      ExpectInvalid(StatusOr<int>(s), c.error, c.name);
    }
  }
}

TEST(PlacementTest, NamesAndTheirInverses) {
  EXPECT_STREQ(ReadModeName(ReadMode::kLocalRead), "local_read");
  EXPECT_STREQ(ReadModeName(ReadMode::kRemoteRead), "remote_read");
  EXPECT_EQ(CutName(kCutAfterBatch), "batch");
  EXPECT_EQ(CutName(3), "3");
  for (Codec c : {Codec::kNone, Codec::kLz4, Codec::kZstd}) {
    StatusOr<Codec> back = ParseCodec(CodecName(c));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, c);
  }
  for (ReadMode m : {ReadMode::kRemoteRead, ReadMode::kLocalRead}) {
    StatusOr<ReadMode> back = ParseReadMode(ReadModeName(m));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(*ParseReadMode("local"), ReadMode::kLocalRead);
  EXPECT_THAT(std::string(ParseCodec("gzip").status().message()),
              HasSubstr("unknown codec 'gzip'"));
  // The wire header stores the codec as this byte.
  EXPECT_EQ(static_cast<int>(Codec::kZstd), 2);
}

}  // namespace
}  // namespace sluice
