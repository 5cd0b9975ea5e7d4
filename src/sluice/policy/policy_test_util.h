// Hand-made profiles shared by the policy tests (docs/policy.md works the same numbers).
#ifndef SLUICE_POLICY_POLICY_TEST_UTIL_H_
#define SLUICE_POLICY_POLICY_TEST_UTIL_H_

#include <string>

#include "sluice/policy/profile.h"

namespace sluice::policy::testing {

inline WorkerProfile Worker(const std::string& address, double cpus, double link_bytes_per_s) {
  WorkerProfile w;
  w.address = address;
  w.cpu_budget = cpus;
  w.link_bytes_per_s = link_bytes_per_s;
  return w;
}

// The standard image pipeline with round numbers (CPU ms per sample, bytes out per sample):
//   0 read_file 0.1 ms, 100 KB | 1 decode_jpeg 1.0 ms, 300 KB | 2 random_resized_crop 0.2 ms,
//   150 KB | 3 random_flip 0.1 ms, 150 KB | 4 normalize 0.4 ms, 600 KB (f32).
// All-local: 1.8 ms per sample. Receiving costs 1 ns per byte (no compression), nothing per
// sample; batching is free. Trainer: 1 CPU (555.6 samples/s). Demand: 64 every 20 ms =
// 3200 samples/s; stall 50%. One worker: 2 CPUs, 10 Gbit/s, storage.
inline Profile StandardProfile() {
  Profile p;
  p.costs.ops = {{"read_file", 0, 0.1e-3, 100e3},
                 {"decode_jpeg", 1, 1.0e-3, 300e3},
                 {"random_resized_crop", 2, 0.2e-3, 150e3},
                 {"random_flip", 3, 0.1e-3, 150e3},
                 {"normalize", 4, 0.4e-3, 600e3}};
  p.costs.source_bytes_per_sample = 100;
  p.costs.raw_bytes_per_sample = 100e3;
  p.costs.codecs = {{Codec::kNone, 1.0, 0, 1e-9}};
  p.consumer.step_s = 0.020;
  p.consumer.batch_size = 64;
  p.consumer.stall_fraction = 0.5;
  p.trainer_cpu_budget = 1.0;
  p.workers = {Worker("w1:7070", 2.0, 1.25e9)};
  return p;
}

// zstd halves the bytes for 2 ns of worker CPU per raw byte; receiving costs 1.5 ns per byte.
inline CodecCost Zstd() { return CodecCost{Codec::kZstd, 2.0, 2e-9, 1.5e-9}; }

}  // namespace sluice::policy::testing

#endif  // SLUICE_POLICY_POLICY_TEST_UTIL_H_
