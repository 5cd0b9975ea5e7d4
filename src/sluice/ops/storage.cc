#include "sluice/ops/storage.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/core/clock.h"
#include "sluice/ops/url_storage.h"

namespace sluice::ops {
namespace {

namespace fs = std::filesystem;

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Opens `path` for reading without blocking (a FIFO with no writer would wait for ever) and
// without becoming the controlling terminal.
StatusOr<int> OpenForRead(const std::string& path, std::string_view shown) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    std::string text = absl::StrCat("cannot open '", Av(shown), "': ", ErrnoText(err));
    return err == ENOENT || err == ENOTDIR ? absl::NotFoundError(text)
                                           : absl::PermissionDeniedError(text);
  }
  return fd;
}

// Opens `rel` under the folder open at `dir` as OpenForRead does, with the kernel keeping the
// whole resolution beneath `dir` (openat2's RESOLVE_BENEATH: "..", an absolute path or an
// absolute symlink, and any symlink whose target leaves, fail with EXDEV; /proc's magic links
// are refused). One path walk, where checking the real path before and after `open` takes a
// readlink per component and another of /proc/self/fd. -1 with errno on any failure, ENOSYS
// where the kernel (before 5.6) or a seccomp filter lacks openat2.
int OpenBeneath(int dir, const char* rel) {
#ifdef SYS_openat2
  struct open_how how {};
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd;
  do {
    fd = static_cast<int>(::syscall(SYS_openat2, dir, rel, &how, sizeof(how)));
  } while (fd < 0 && errno == EINTR);
  return fd;
#else
  errno = ENOSYS;
  return -1;
#endif
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

Status OverLimit(std::string_view shown, int64_t size, int64_t max_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "'", Av(shown), "' is ", size, " bytes, over the file-size limit of ", max_bytes,
      " bytes (raise it with options.max_file_bytes, on a worker with --max-file-bytes)"));
}

// Reads the regular file open at `fd`: refuses anything else, and a file over `max_bytes`
// before allocating for it.
StatusOr<Tensor> ReadOpenFile(int fd, std::string_view shown, int64_t max_bytes,
                              const std::function<void(int64_t)>& before_read) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat '", Av(shown), "': ", ErrnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", Av(shown), "': ", KindOf(st.st_mode),
                     ", only regular files are read"));
  }
  if (st.st_size > max_bytes) return OverLimit(shown, st.st_size, max_bytes);
  if (before_read) before_read(st.st_size);
  // st_size can be stale (the file grows while read): read past it, up to the limit.
  size_t capacity = static_cast<size_t>(st.st_size);
  Tensor data = Tensor::Empty(DType::kBytes, {static_cast<int64_t>(capacity)});
  size_t filled = 0;
  while (true) {
    if (filled == capacity) {
      char probe[4096];
      const ssize_t n = ::read(fd, probe, sizeof(probe));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::DataLossError(absl::StrCat("cannot read '", Av(shown), "': ", ErrnoText(errno)));
      }
      if (n == 0) break;
      const size_t grown = std::max(capacity * 2, capacity + static_cast<size_t>(n));
      if (filled + static_cast<size_t>(n) > static_cast<size_t>(max_bytes)) {
        return OverLimit(shown, static_cast<int64_t>(filled + n), max_bytes);
      }
      Tensor bigger = Tensor::Empty(
          DType::kBytes, {static_cast<int64_t>(std::min<size_t>(grown, max_bytes))});
      if (filled > 0) std::memcpy(bigger.mutable_raw(), data.raw(), filled);
      std::memcpy(bigger.mutable_raw() + filled, probe, static_cast<size_t>(n));
      filled += static_cast<size_t>(n);
      capacity = static_cast<size_t>(bigger.shape()[0]);
      data = std::move(bigger);
      continue;
    }
    const ssize_t n = ::read(fd, data.mutable_raw() + filled, capacity - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat("cannot read '", Av(shown), "': ", ErrnoText(errno)));
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  if (filled == capacity) return data;
  return data.Slice(0, static_cast<int64_t>(filled));
}

Status EmptyPath() { return absl::InvalidArgumentError("the file path is empty"); }

// The size of the regular file open at `fd`; anything else is refused.
StatusOr<int64_t> RegularFileSize(int fd, std::string_view shown) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat '", Av(shown), "': ", ErrnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read '", Av(shown), "': ",
                                                   KindOf(st.st_mode),
                                                   ", only regular files are read"));
  }
  return static_cast<int64_t>(st.st_size);
}

}  // namespace

StatusOr<int64_t> Storage::Size(std::string_view path) const {
  SLUICE_ASSIGN_OR_RETURN(int raw, Open(path));
  Fd fd(raw);
  return RegularFileSize(fd.get(), path);
}

StatusOr<Tensor> Storage::ReadRange(std::string_view path, int64_t offset, int64_t size,
                                    int64_t max_bytes) const {
  if (offset < 0 || size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read '", Av(path), "': the range at ",
                                                   offset, " of ", size, " bytes is negative"));
  }
  if (size > max_bytes) return OverLimit(path, size, max_bytes);
  SLUICE_ASSIGN_OR_RETURN(int raw, Open(path));
  Fd fd(raw);
  SLUICE_ASSIGN_OR_RETURN(const int64_t file_size, RegularFileSize(fd.get(), path));
  if (offset > file_size || size > file_size - offset) {
    return absl::DataLossError(absl::StrCat("'", Av(path), "' ends at ", file_size,
                                            " bytes, before the ", size, " bytes at offset ",
                                            offset, " (truncated)"));
  }
  BeforeRead(size);
  Tensor data = Tensor::Empty(DType::kBytes, {size});
  int64_t filled = 0;
  while (filled < size) {
    const ssize_t n = ::pread(fd.get(), data.mutable_raw() + filled,
                              static_cast<size_t>(size - filled), offset + filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat("cannot read '", Av(path), "': ", ErrnoText(errno)));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("'", Av(path), "' ended while reading ", size,
                                              " bytes at offset ", offset, " (truncated)"));
    }
    filled += n;
  }
  return data;
}

Status CheckReadable(const Storage& storage, std::string_view path) {
  if (path.empty()) return EmptyPath();
  // A URL is readable when its store answers for its size (a storage without URLs refuses).
  if (IsUrl(path)) return storage.Size(path).status();
  SLUICE_ASSIGN_OR_RETURN(std::string resolved, storage.Resolve(path));
  SLUICE_ASSIGN_OR_RETURN(int fd, OpenForRead(resolved, path));
  struct stat st;
  const int stat_result = ::fstat(fd, &st);
  const int err = errno;
  ::close(fd);
  if (stat_result != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat '", Av(path), "': ", ErrnoText(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read '", Av(path), "': ",
                                                   KindOf(st.st_mode),
                                                   ", only regular files are read"));
  }
  return absl::OkStatus();
}

StatusOr<double> MeasureReadRate(const Storage& storage, std::string_view path) {
  if (!IsUrl(path)) return 0.0;
  SLUICE_ASSIGN_OR_RETURN(int64_t size, storage.Size(path));
  const int64_t most = std::min(size, kReadRateProbeBytes);
  if (most <= 1) return 0.0;
  const auto timed = [&](int64_t bytes) -> StatusOr<double> {
    const int64_t t0 = NowNanos();
    SLUICE_RETURN_IF_ERROR(storage.ReadRange(path, 0, bytes, bytes).status());
    return (NowNanos() - t0) / 1e9;
  };
  SLUICE_ASSIGN_OR_RETURN(double latency_s, timed(1));
  double rate = 0;
  for (int64_t n = std::min<int64_t>(64 << 10, most);; n = std::min(4 * n, most)) {
    SLUICE_ASSIGN_OR_RETURN(double took_s, timed(n));
    const double transfer_s = took_s - latency_s;
    if (transfer_s >= std::max(latency_s, kReadRateMinTimedS)) {
      rate = static_cast<double>(n) / transfer_s;
    }
    if (took_s >= kReadRateTargetS || n == most) break;
  }
  return rate;
}

namespace {

class LocalStorageImpl final : public Storage {
 public:
  StatusOr<Tensor> ReadFile(std::string_view path, int64_t max_bytes) const override {
    if (path.empty()) return EmptyPath();
    const std::string p(path);
    SLUICE_ASSIGN_OR_RETURN(int raw, OpenForRead(p, path));
    Fd fd(raw);
    return ReadOpenFile(fd.get(), path, max_bytes, {});
  }
  StatusOr<std::string> Resolve(std::string_view path) const override {
    if (path.empty()) return EmptyPath();
    return std::string(path);
  }

 protected:
  StatusOr<int> Open(std::string_view path) const override {
    if (path.empty()) return EmptyPath();
    return OpenForRead(std::string(path), path);
  }
};

class NoStorageImpl final : public Storage {
 public:
  explicit NoStorageImpl(std::string reason) : reason_(std::move(reason)) {}
  StatusOr<Tensor> ReadFile(std::string_view path, int64_t) const override {
    return Resolve(path).status();
  }
  StatusOr<std::string> Resolve(std::string_view path) const override {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read '", Av(path), "': reads no files: ", reason_));
  }

 protected:
  StatusOr<int> Open(std::string_view path) const override { return Resolve(path).status(); }

 private:
  std::string reason_;
};

// Inside iff the path relative to `root` does not climb out.
bool Inside(const fs::path& full, const fs::path& root) {
  const fs::path rel = full.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

class ConfinedStorageImpl final : public Storage {
 public:
  ConfinedStorageImpl(std::string root, bool allow_symlinks_out,
                      std::function<void(int64_t)> before_read)
      : root_(fs::path(std::move(root)).lexically_normal()),
        allow_symlinks_out_(allow_symlinks_out),
        before_read_(std::move(before_read)) {
    // The root itself may be a symlink (a mounted volume): its real path is what opened
    // files must lie under.
    char buf[PATH_MAX];
    real_root_ = ::realpath(root_.c_str(), buf) != nullptr ? fs::path(buf) : root_;
    // The root's folder itself (its symlink followed), for openat2; -1 if it cannot be opened
    // now, and every open takes the checked path.
    root_fd_ = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  }
  ~ConfinedStorageImpl() override {
    if (root_fd_ >= 0) ::close(root_fd_);
  }
  ConfinedStorageImpl(const ConfinedStorageImpl&) = delete;
  ConfinedStorageImpl& operator=(const ConfinedStorageImpl&) = delete;

  StatusOr<std::string> Resolve(std::string_view path) const override {
    SLUICE_ASSIGN_OR_RETURN(const fs::path full, Lexical(path));
    if (allow_symlinks_out_) return full.string();
    // Symlinks followed: where the path really leads must be inside too. (A path that does
    // not exist yet fails at open with NotFound.)
    char buf[PATH_MAX];
    if (::realpath(full.c_str(), buf) != nullptr && !Inside(fs::path(buf), real_root_)) {
      return Outside(path, " through a symlink");
    }
    return full.string();
  }

  StatusOr<Tensor> ReadFile(std::string_view path, int64_t max_bytes) const override {
    SLUICE_ASSIGN_OR_RETURN(int raw, Open(path));
    Fd fd(raw);
    return ReadOpenFile(fd.get(), path, max_bytes, before_read_);
  }

 protected:
  StatusOr<int> Open(std::string_view path) const override {
    if (!allow_symlinks_out_ && root_fd_ >= 0) {
      // The kernel confines the walk: a file opened this way lies inside the real root. Any
      // failure (a symlink that leaves or is absolute, a missing file, no openat2) goes the
      // checked way below, which gives its verdict and its message.
      SLUICE_ASSIGN_OR_RETURN(const fs::path full, Lexical(path));
      const int fd = OpenBeneath(root_fd_, full.lexically_relative(root_).c_str());
      if (fd >= 0) return fd;
    }
    SLUICE_ASSIGN_OR_RETURN(std::string full, Resolve(path));
    SLUICE_ASSIGN_OR_RETURN(int raw, OpenForRead(full, path));
    Fd fd(raw);
    if (!allow_symlinks_out_) {
      // What was opened, whatever changed between Resolve and open (a symlink swapped in).
      char buf[PATH_MAX];
      const std::string link = absl::StrCat("/proc/self/fd/", fd.get());
      const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
      if (n > 0) {
        buf[n] = '\0';
        if (!Inside(fs::path(buf), real_root_)) return Outside(path, " through a symlink");
      }
    }
    return fd.Release();
  }
  void BeforeRead(int64_t bytes) const override {
    if (before_read_) before_read_(bytes);
  }

 private:
  // `path` (relative to the root, or absolute) normalized, where its text stays inside the
  // root; symlinks are not looked at.
  StatusOr<fs::path> Lexical(std::string_view path) const {
    if (path.empty()) return EmptyPath();
    const fs::path p(path);
    fs::path full = (p.is_absolute() ? p : root_ / p).lexically_normal();
    if (!Inside(full, root_)) return Outside(path, "");
    return full;
  }
  Status Outside(std::string_view path, std::string_view how) const {
    return absl::PermissionDeniedError(
        absl::StrCat("path '", Av(path), "' is outside the worker's data root '",
                     root_.string(), "'", Av(how),
                     how.empty() ? "" : " (start the worker with --allow-symlinks-out to follow it)"));
  }

  fs::path root_;
  fs::path real_root_;
  int root_fd_ = -1;
  bool allow_symlinks_out_;
  std::function<void(int64_t)> before_read_;
};

}  // namespace

const Storage& LocalStorage() {
  static const LocalStorageImpl* storage = new LocalStorageImpl();
  return *storage;
}

std::unique_ptr<Storage> MakeNoStorage(std::string reason) {
  return std::make_unique<NoStorageImpl>(std::move(reason));
}

std::unique_ptr<Storage> MakeConfinedStorage(std::string root, bool allow_symlinks_out,
                                             std::function<void(int64_t)> before_read) {
  return std::make_unique<ConfinedStorageImpl>(std::move(root), allow_symlinks_out,
                                               std::move(before_read));
}

const OpEnv& DefaultOpEnv() {
  static const OpEnv* env = new OpEnv();
  return *env;
}

}  // namespace sluice::ops
