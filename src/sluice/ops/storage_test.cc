#include "sluice/ops/storage.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::ops {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("sluice-storage-test-" + std::to_string(::getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "root" / "sub");
    fs::create_directories(base_ / "outside");
    Write(base_ / "root" / "sub" / "a.bin", "inside");
    Write(base_ / "outside" / "secret.txt", "secret");
  }
  void TearDown() override { fs::remove_all(base_); }

  static void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  std::string Root() const { return (base_ / "root").string(); }

  fs::path base_;
};

TEST_F(StorageTest, LocalReadsRegularFiles) {
  auto data = LocalStorage().ReadFile((base_ / "outside" / "secret.txt").string(), 1 << 20);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->bytes(), "secret");
}

TEST_F(StorageTest, MissingFileIsNotFound) {
  auto data = LocalStorage().ReadFile((base_ / "nope").string(), 1 << 20);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("No such file"));
}

TEST_F(StorageTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const fs::path fifo = base_ / "root" / "fifo.jpg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto data = LocalStorage().ReadFile(fifo.string(), 1 << 20);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("a FIFO, only regular files are read"));
}

TEST_F(StorageTest, DevicesAndFoldersAreRefused) {
  auto dev = LocalStorage().ReadFile("/dev/zero", 1 << 20);
  EXPECT_THAT(std::string(dev.status().message()), HasSubstr("a character device"));
  auto dir = LocalStorage().ReadFile(Root(), 1 << 20);
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("a folder"));
}

TEST_F(StorageTest, AFileOverTheLimitIsRefused) {
  Write(base_ / "root" / "big.bin", std::string(1000, 'x'));
  auto data = LocalStorage().ReadFile((base_ / "root" / "big.bin").string(), 999);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("is 1000 bytes, over the file-size limit of 999 bytes"));
  EXPECT_TRUE(LocalStorage().ReadFile((base_ / "root" / "big.bin").string(), 1000).ok());
}

TEST_F(StorageTest, ConfinedResolvesRelativeAndAbsolutePathsInsideTheRoot) {
  auto storage = MakeConfinedStorage(Root(), /*allow_symlinks_out=*/false);
  auto rel = storage->ReadFile("sub/a.bin", 1 << 20);
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_EQ(rel->bytes(), "inside");
  auto abs = storage->ReadFile((base_ / "root" / "sub" / "a.bin").string(), 1 << 20);
  ASSERT_TRUE(abs.ok()) << abs.status();
  auto dots = storage->ReadFile("sub/../sub/a.bin", 1 << 20);
  EXPECT_TRUE(dots.ok()) << dots.status();
}

TEST_F(StorageTest, ConfinedRefusesPathsThatLeaveTheRoot) {
  auto storage = MakeConfinedStorage(Root(), false);
  for (const std::string& path : {std::string("../outside/secret.txt"),
                                  (base_ / "outside" / "secret.txt").string(),
                                  std::string("/etc/hostname"), std::string("sub/../../x")}) {
    auto data = storage->ReadFile(path, 1 << 20);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(std::string(data.status().message()),
                HasSubstr("is outside the worker's data root '" + Root() + "'"))
        << path;
  }
}

TEST_F(StorageTest, ASymlinkOutOfTheRootIsRefusedUnlessAllowed) {
  fs::create_symlink(base_ / "outside" / "secret.txt", base_ / "root" / "link.txt");
  fs::create_directory_symlink(base_ / "outside", base_ / "root" / "dirlink");
  auto confined = MakeConfinedStorage(Root(), false);
  for (const char* path : {"link.txt", "dirlink/secret.txt"}) {
    auto data = confined->ReadFile(path, 1 << 20);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(std::string(data.status().message()),
                HasSubstr("through a symlink (start the worker with --allow-symlinks-out"));
  }
  auto allowed = MakeConfinedStorage(Root(), /*allow_symlinks_out=*/true);
  auto data = allowed->ReadFile("link.txt", 1 << 20);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->bytes(), "secret");
}

TEST_F(StorageTest, ASymlinkInsideTheRootIsFollowed) {
  fs::create_symlink(base_ / "root" / "sub" / "a.bin", base_ / "root" / "alias.bin");
  auto data = MakeConfinedStorage(Root(), false)->ReadFile("alias.bin", 1 << 20);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->bytes(), "inside");
}

TEST_F(StorageTest, RelativeSymlinksThatStayInsideAreFollowedAndOnesThatClimbOutAreNot) {
  // Relative links resolve in the kernel's confined walk; "../" out of the root does not.
  fs::create_symlink("sub/a.bin", base_ / "root" / "rel-alias.bin");
  fs::create_directory_symlink("sub", base_ / "root" / "rel-dir");
  fs::create_symlink("../outside/secret.txt", base_ / "root" / "climb.txt");
  fs::create_symlink("../../outside/secret.txt", base_ / "root" / "sub" / "climb2.txt");
  auto confined = MakeConfinedStorage(Root(), false);
  for (const char* path : {"rel-alias.bin", "rel-dir/a.bin", "rel-dir/../sub/a.bin"}) {
    auto data = confined->ReadFile(path, 1 << 20);
    ASSERT_TRUE(data.ok()) << path << ": " << data.status();
    EXPECT_EQ(data->bytes(), "inside");
  }
  for (const char* path : {"climb.txt", "sub/climb2.txt"}) {
    auto data = confined->ReadFile(path, 1 << 20);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(std::string(data.status().message()), HasSubstr("through a symlink")) << path;
  }
}

TEST_F(StorageTest, ConfinedRefusesFifosFoldersAndMissingFilesWithTheirOwnMessages) {
  ASSERT_EQ(::mkfifo((base_ / "root" / "fifo.jpg").c_str(), 0600), 0);
  auto confined = MakeConfinedStorage(Root(), false);
  auto fifo = confined->ReadFile("fifo.jpg", 1 << 20);
  EXPECT_THAT(std::string(fifo.status().message()), HasSubstr("a FIFO, only regular files"));
  auto dir = confined->ReadFile("sub", 1 << 20);
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("a folder"));
  auto missing = confined->ReadFile("sub/none.bin", 1 << 20);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("cannot open 'sub/none.bin': No such file"));
  auto magic = confined->ReadFile("../../proc/self/root/etc/hostname", 1 << 20);
  EXPECT_EQ(magic.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(StorageTest, ARootThatIsASymlinkWorks) {
  fs::create_directory_symlink(base_ / "root", base_ / "root-link");
  auto data = MakeConfinedStorage((base_ / "root-link").string(), false)
                  ->ReadFile("sub/a.bin", 1 << 20);
  ASSERT_TRUE(data.ok()) << data.status();
}

TEST_F(StorageTest, ConfinedCallsBeforeReadWithTheSize) {
  int64_t seen = -1;
  auto storage = MakeConfinedStorage(Root(), false, [&](int64_t bytes) { seen = bytes; });
  ASSERT_TRUE(storage->ReadFile("sub/a.bin", 1 << 20).ok());
  EXPECT_EQ(seen, 6);
}

TEST_F(StorageTest, NoStorageReadsNothing) {
  auto storage = MakeNoStorage("this worker was started without --data-root");
  auto data = storage->ReadFile((base_ / "root" / "sub" / "a.bin").string(), 1 << 20);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("reads no files: this worker was started without --data-root"));
}

TEST(ConfinedResolveTest, ResolvesAndConfinesPaths) {
  const std::string root = "/sluice-no-such-root";
  auto storage = MakeConfinedStorage(root, false);
  EXPECT_EQ(*storage->Resolve("a/b.jpg"), root + "/a/b.jpg");
  EXPECT_EQ(*MakeConfinedStorage(root + "/", false)->Resolve("./a/../b.jpg"), root + "/b.jpg");
  EXPECT_EQ(*storage->Resolve(root + "/x/y.jpg"), root + "/x/y.jpg");
  for (const std::string& bad : {std::string("/etc/passwd"), std::string("../etc/passwd"),
                                 std::string("a/../../etc/passwd"), root + "2/x.jpg",
                                 std::string("")}) {
    EXPECT_FALSE(storage->Resolve(bad).ok()) << bad;
  }
  EXPECT_EQ(*LocalStorage().Resolve("a/b.jpg"), "a/b.jpg");
}

}  // namespace
}  // namespace sluice::ops
