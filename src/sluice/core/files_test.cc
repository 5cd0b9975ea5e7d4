#include "sluice/core/files.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "sluice_files_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FilesTest, ReplacesTheFileWholeAndLeavesNoTemporaryFile) {
  const fs::path path = dir_ / "state.json";
  ASSERT_TRUE(WriteFileAtomically(path.string(), "first\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path.string(), "second, longer\n").ok());
  EXPECT_EQ(ReadAll(path), "second, longer\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FilesTest, AFolderThatIsNotThereIsAnErrorNamingTheFile) {
  const fs::path path = dir_ / "missing" / "ready.json";
  Status s = WriteFileAtomically(path.string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr((dir_ / "missing").string()));
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace sluice
