// Writes the seed corpus of fuzz_wire into the folder given as argument: a few element
// groups encoded with every codec, in the fuzz input layout (u32 little-endian header
// length, header, payload).
// Usage: fuzz_make_wire_seeds fuzz/corpus/wire
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "sluice/rpc/wire.h"

namespace {

using sluice::DType;
using sluice::Element;
using sluice::Tensor;

std::vector<std::vector<Element>> Groups() {
  std::vector<std::vector<Element>> groups;
  Element image;
  image.id = {1, 7};
  image.origin = "data/a/0001.jpg";
  Tensor pixels = Tensor::Zeros(DType::kU8, {4, 3, 3});
  for (size_t i = 0; i < pixels.nbytes(); ++i) pixels.mutable_raw()[i] = static_cast<uint8_t>(i);
  image.tensors = {pixels, Tensor::Scalar(3)};
  image.decoded_region = {8, 6, 0, 0, 6, 8};
  groups.push_back({image});

  Element batch;
  batch.id = {0, 2};
  batch.tensors = {Tensor::Zeros(DType::kF32, {2, 5}), Tensor::Zeros(DType::kI16, {2, 0}),
                   Tensor::FromBytes("text")};
  batch.members = {{0, 2}, {0, 3}};
  groups.push_back({batch, image});
  groups.push_back({});
  return groups;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  int n = 0;
  for (const auto& group : Groups()) {
    for (auto codec : {sluice::Codec::kNone, sluice::Codec::kLz4,
                       sluice::Codec::kZstd}) {
      auto encoded = sluice::rpc::EncodeElements(group, codec);
      if (!encoded.ok()) {
        std::fprintf(stderr, "%s\n", std::string(encoded.status().message()).c_str());
        return 1;
      }
      std::string out;
      uint32_t header_size = static_cast<uint32_t>(encoded->header.size());
      for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(header_size >> (8 * i)));
      out += encoded->header;
      out += encoded->FlattenPayload();
      std::ofstream(std::string(argv[1]) + "/seed" + std::to_string(n++), std::ios::binary)
          << out;
    }
  }
  return 0;
}
