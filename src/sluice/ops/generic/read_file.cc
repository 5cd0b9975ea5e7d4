// read_file: reads the file named by a bytes field into a new `data` field.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "sluice/ops/generic/generic_ops.h"
#include "sluice/ops/op_util.h"

namespace sluice::ops {
namespace {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

class FileCloser {
 public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() { ::close(fd_); }
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;

 private:
  int fd_;
};

StatusOr<Tensor> ReadWholeFile(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the file path is empty");
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = errno;
    std::string text = absl::StrCat("cannot open '", path, "': ", ErrnoText(err));
    return err == ENOENT ? absl::NotFoundError(text) : absl::PermissionDeniedError(text);
  }
  FileCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat '", path, "': ", ErrnoText(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", path, "': ", ErrnoText(EISDIR)));
  }
  // st_size is a hint (0 for pipes and some special files): grow if the file is longer.
  size_t capacity = st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  Tensor data = Tensor::Empty(DType::kBytes, {static_cast<int64_t>(capacity)});
  size_t filled = 0;
  while (true) {
    if (filled == capacity) {
      // Probe for more bytes than stat promised; usually there are none.
      char probe[4096];
      ssize_t n = ::read(fd, probe, sizeof(probe));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::DataLossError(absl::StrCat("cannot read '", path, "': ", ErrnoText(errno)));
      }
      if (n == 0) break;
      size_t grown = std::max(capacity * 2, capacity + static_cast<size_t>(n));
      Tensor bigger = Tensor::Empty(DType::kBytes, {static_cast<int64_t>(grown)});
      if (filled > 0) std::memcpy(bigger.mutable_raw(), data.raw(), filled);
      std::memcpy(bigger.mutable_raw() + filled, probe, static_cast<size_t>(n));
      filled += static_cast<size_t>(n);
      capacity = grown;
      data = std::move(bigger);
      continue;
    }
    ssize_t n = ::read(fd, data.mutable_raw() + filled, capacity - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat("cannot read '", path, "': ", ErrnoText(errno)));
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  if (filled == capacity) return data;
  return data.Slice(0, static_cast<int64_t>(filled));
}

class ReadFileOp final : public Op {
 public:
  ReadFileOp(const OpSchema* schema, Args args, Schema input, Schema output, int path_index,
             int data_index)
      : Op(schema, std::move(args), std::move(input), std::move(output)),
        path_index_(path_index),
        data_index_(data_index) {}

  Status Apply(Element& element, const OpContext& ctx) const override {
    SLUICE_ASSIGN_OR_RETURN(const Tensor* path, InputTensor(*this, element, path_index_));
    SLUICE_ASSIGN_OR_RETURN(Tensor data, ReadWholeFile(std::string(path->bytes())));
    SetTensor(element, data_index_, std::move(data));
    return absl::OkStatus();
  }

 private:
  int path_index_;
  int data_index_;
};

}  // namespace

OpDef ReadFileOpDef() {
  OpDef def;
  def.schema = MakeOpSchema(
      "read_file", /*random=*/false,
      "Reads the whole file named by `field` into a new field `data` (bytes[?]); `field` is "
      "kept.",
      {Arg("field", ArgType::kString)
           .Default("path")
           .Doc("the bytes field holding the file path")});
  def.factory = [](const OpSchema& schema, const Args& args,
                   const Schema& input) -> StatusOr<std::unique_ptr<Op>> {
    SLUICE_ASSIGN_OR_RETURN(
        int path, RequireField(input, args.String("field"), {DType::kBytes}, 1, "bytes[?]"));
    Schema output = input;
    int data = output.Set(FieldSpec{"data", DType::kBytes, {kUnknownDim}});
    return std::make_unique<ReadFileOp>(&schema, args, input, std::move(output), path, data);
  };
  return def;
}

}  // namespace sluice::ops
