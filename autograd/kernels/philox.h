// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator, so element i's random bits depend only on (key, counter(i)). Dropout
// masks and random initialisation use it, on CPU and GPU alike.
#pragma once

#include <cstdint>

#include "autograd/kernels/host_device.h"

namespace shardscope::kernels {

struct Philox4 {
  std::uint32_t v[4];
};

SS_HOST_DEVICE void philox_round(std::uint32_t ctr[4], const std::uint32_t key[2]) {
  constexpr std::uint64_t kMul0 = 0xD2511F53u;
  constexpr std::uint64_t kMul1 = 0xCD9E8D57u;
  const std::uint64_t p0 = kMul0 * ctr[0];
  const std::uint64_t p1 = kMul1 * ctr[2];
  const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
  const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
  const std::uint32_t c1 = ctr[1], c3 = ctr[3];
  ctr[0] = hi1 ^ c1 ^ key[0];
  ctr[1] = lo1;
  ctr[2] = hi0 ^ c3 ^ key[1];
  ctr[3] = lo0;
}

// Ten rounds of Philox 4x32 on counter (c0..c3) with a 64-bit key.
SS_HOST_DEVICE Philox4 philox4x32(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                  std::uint32_t c3, std::uint64_t key64) {
  std::uint32_t ctr[4] = {c0, c1, c2, c3};
  std::uint32_t key[2] = {static_cast<std::uint32_t>(key64),
                          static_cast<std::uint32_t>(key64 >> 32)};
  for (int round = 0; round < 10; ++round) {
    philox_round(ctr, key);
    key[0] += 0x9E3779B9u;  // Weyl increments
    key[1] += 0xBB67AE85u;
  }
  return Philox4{{ctr[0], ctr[1], ctr[2], ctr[3]}};
}

// The 32 random bits of element `index` in stream (stream, step) under `seed`. One Philox call
// yields four words, so elements 4j..4j+3 share a counter and take word index % 4.
SS_HOST_DEVICE std::uint32_t philox_bits(std::uint64_t seed, std::uint32_t stream,
                                         std::uint32_t step, std::uint64_t index) {
  const std::uint64_t block = index >> 2;
  const Philox4 r = philox4x32(static_cast<std::uint32_t>(block),
                               static_cast<std::uint32_t>(block >> 32), stream, step, seed);
  return r.v[index & 3u];
}

// Mixes (seed, purpose) into an independent 64-bit key with the SplitMix64 finaliser (Steele,
// Lea and Flood 2014), so the weights, inputs and targets drawn from one user seed never share a
// Philox stream.
SS_HOST_DEVICE std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t purpose) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (purpose + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 bits of resolution (exact in f32).
SS_HOST_DEVICE double uniform_from_bits(std::uint32_t bits) {
  return static_cast<double>(bits >> 8) * (1.0 / 16777216.0);
}

// kernels::dropout_keep's test, uniform_from_bits(bits) = (bits >> 8) / 2^24 >= p, on integers:
// (bits >> 8) >= ceil(p 2^24), the same test since p 2^24 is exact in double.
inline std::uint32_t dropout_keep_threshold(double p) {
  const double scaled = p * 16777216.0;
  auto t = static_cast<std::uint32_t>(scaled);
  return static_cast<double>(t) < scaled ? t + 1 : t;
}
SS_HOST_DEVICE bool dropout_keeps(std::uint32_t bits, std::uint32_t threshold) {
  return (bits >> 8) >= threshold;
}

// Dropout keeps an element when its uniform draw is >= p.
SS_HOST_DEVICE bool dropout_keep(std::uint64_t seed, std::uint32_t stream, std::uint32_t step,
                                 std::uint64_t index, double p) {
  return uniform_from_bits(philox_bits(seed, stream, step, index)) >= p;
}

}  // namespace shardscope::kernels
