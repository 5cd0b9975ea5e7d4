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

// unequal-workers (docs/BENCHMARKS.md): a 0.5-CPU trainer, workers of 0.25 and 1.0 CPU on
// 1 Gbit links (as its first run's probe read them), a 15 ms step, 64 per batch; the standard
// image pipeline's costs as those runs measured them (320x240 JPEGs).
inline Profile UnequalWorkersProfile() {
  Profile p;
  p.costs.ops = {{"read_file", 0, 20e-6, 24000},
                 {"decode_jpeg", 1, 420e-6, 230400},
                 {"random_resized_crop", 2, 90e-6, 150528},
                 {"random_flip", 3, 25e-6, 150528},
                 {"normalize", 4, 110e-6, 602112}};
  p.costs.source_bytes_per_sample = 100;
  p.costs.raw_bytes_per_sample = 24000;
  p.costs.batch_cpu_s_per_sample = 90e-6;
  p.costs.local_cpu_s_per_sample = 130e-6;
  p.costs.recv_cpu_s_per_sample = 100e-6;
  p.costs.codecs = {{Codec::kNone, 1.0, 0, 0.409e-9, kAnyCut}};
  p.consumer.step_s = 0.01512;
  p.consumer.batch_size = 64;
  p.consumer.stall_fraction = 0.81;
  p.trainer_cpu_budget = 0.5;
  p.workers = {Worker("w0:7700", 0.25, 1.1e8), Worker("w1:7700", 1.0, 0.88e8)};
  return p;
}

// zstd halves the bytes for 2 ns of worker CPU per raw byte; receiving costs 1.5 ns per byte.
inline CodecCost Zstd() { return CodecCost{Codec::kZstd, 2.0, 2e-9, 1.5e-9}; }

}  // namespace sluice::policy::testing

#endif  // SLUICE_POLICY_POLICY_TEST_UTIL_H_
