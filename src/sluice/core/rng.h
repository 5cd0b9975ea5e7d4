// Identity-seeded randomness. An op's random draws for a sample come from
// SeedFor(pipeline seed, epoch, source index, op position), so the same sample gets the same
// crop wherever and whenever it is processed (locally, on any worker, after a resume).
// Rng is a small value type (xoshiro256**); not thread-safe, make one per use.
#ifndef SLUICE_CORE_RNG_H_
#define SLUICE_CORE_RNG_H_

#include <cstdint>

namespace sluice {

// A 64-bit mix of the four identity components (splitmix64 finalisers chained); different
// components and different positions give independent-looking seeds.
uint64_t SeedFor(uint64_t seed, uint32_t epoch, uint64_t index, uint32_t op_position);

class Rng {
 public:
  explicit Rng(uint64_t seed);

  uint64_t NextU64();
  // Uniform in [0, 1).
  double Uniform();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [lo, hi] (inclusive). REQUIRES: lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi);
  // True with probability p.
  bool Bernoulli(double p) { return Uniform() < p; }

 private:
  uint64_t s_[4];
};

}  // namespace sluice

#endif  // SLUICE_CORE_RNG_H_
