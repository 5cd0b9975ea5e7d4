#include "sluice/core/sample_digests.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace sluice {
namespace {

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t MixWord(uint64_t w) { return Rotl(w * 0x87C37B91114253D5ULL, 31) * 0x4CF5AD432745937FULL; }

uint64_t Finalize(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ULL;
  return h ^ (h >> 33);
}

uint64_t DigestTensor(const Tensor& t, uint64_t seed) {
  uint64_t h = Digest64(t.bytes(), seed);
  h = Finalize(h ^ MixWord(static_cast<uint64_t>(t.dtype()) + 1));
  for (int64_t d : t.shape()) h = Finalize(h ^ MixWord(static_cast<uint64_t>(d)));
  return h;
}

}  // namespace

uint64_t Digest64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed ^ (bytes.size() * 0x9E3779B97F4A7C15ULL);
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h ^= MixWord(w);
    h = Rotl(h, 27) * 5 + 0x52DCE729;
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  h ^= MixWord(tail ^ (static_cast<uint64_t>(n) << 56));
  return Finalize(h);
}

void SampleDigests::Add(const Element& element) {
  if (element.members.empty()) {
    uint64_t h = 0;
    for (const Tensor& t : element.tensors) h = DigestTensor(t, h);
    digests_[element.id] = h;
    return;
  }
  const int64_t n = static_cast<int64_t>(element.members.size());
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = 0;
    for (const Tensor& t : element.tensors) {
      // A tensor without the batch dimension is shared by the whole batch.
      const bool batched = t.rank() >= 1 && t.dim(0) == n;
      h = DigestTensor(batched ? t.Slice(i, i + 1) : t, h);
    }
    digests_[element.members[i]] = h;
  }
}

uint64_t SampleDigests::Combined() const {
  uint64_t h = 0x5A5A5A5A5A5A5A5AULL;
  for (const auto& [id, digest] : digests_) {
    h = Finalize(h ^ MixWord(id.epoch));
    h = Finalize(h ^ MixWord(id.index));
    h = Finalize(h ^ MixWord(digest));
  }
  return h;
}

std::string SampleDigests::ToString() const {
  std::string out;
  for (const auto& [id, digest] : digests_) {
    absl::StrAppendFormat(&out, "%d %d %016x\n", id.epoch, id.index, digest);
  }
  absl::StrAppendFormat(&out, "all %016x\n", Combined());
  return out;
}

}  // namespace sluice
