// What the tests of the reference backend share: deterministic inputs, the tolerance of the tuned
// backends against the reference one (written once, here), and the comparison of one op case run
// on a tested backend and on the reference backend.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/tensor.h"

namespace shardscope {

// ctest's names read "GetParam() = f32" (found by argument-dependent lookup).
inline void PrintTo(DType dtype, std::ostream* os) {
  *os << dtype_name(dtype);
}

}  // namespace shardscope

namespace shardscope::testing {

// |tested - reference| <= tol (1 + |reference|) per element, tol by dtype. The inputs are O(1).
// The reference sums every dot product and row in double and rounds once; the tuned backend sums
// f32 products in f32 in OpenBLAS's blocked order and rounds the LayerNorm normalisation before
// its affine part. Its error is a few f32 roundings (6e-8 each) over sums of up to a few hundred
// O(1) terms: measured between 1e-6 and 2e-6 here (GEMM, gelu'). 1e-4 leaves ~50x over that; a bug
// in the row math (a wrong constant, a missing or extra term, an off-by-one mask) moves results
// by 1e-3 or far more (ReferenceBackend.PlantedRowMathBugsAreCaught shows seven such bugs caught).
// f64: roundings of 1e-16 over the same sums, measured below 1e-14; 1e-10 leaves 10^4x.
// bf16 / f16: both backends read the same 2-byte inputs and round each result to the 2-byte type
// once; they differ before that rounding by the f32 error above (the CPU computes in f32, the
// reference in double), which can put the two on either side of a rounding boundary: one ulp of
// the result apart, and an ulp is at most 2u |result| (u = 2^-8 for bf16, 2^-11 for f16, the
// unit roundoff). So tol = 2u + the f32 tolerance. An error the 2-byte path alone makes (a
// truncation instead of a rounding, a 2-byte accumulator) is larger: see Bf16F16Test.
inline double reference_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 1e-4;
    case DType::bf16:
      return 2 * 0x1p-8 + 1e-4;
    case DType::f16:
      return 2 * 0x1p-11 + 1e-4;
    case DType::f64:
    case DType::u8:
      break;
  }
  return 1e-10;
}

// The name of a dtype instance: "f32", "f64", "bf16" or "f16".
struct DTypeName {
  std::string operator()(const ::testing::TestParamInfo<DType>& info) const {
    return dtype_name(info.param);
  }
};

// Deterministic values in [lo, hi): a hash of (seed, i), the same on every backend.
inline std::vector<double> test_values(std::int64_t n, std::uint64_t seed, double lo = -2.0,
                                       double hi = 2.0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(i) + 1;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 29)) * 0x94D049BB133111EBull;
    z ^= z >> 32;
    v[static_cast<std::size_t>(i)] = lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  return v;
}

inline Tensor test_input(Context& ctx, const Shape& shape, DType dtype, std::uint64_t seed,
                         double lo = -2.0, double hi = 2.0) {
  return Tensor::from_vector(ctx, shape, test_values(shape.numel(), seed, lo, hi), dtype);
}

// One op case: builds its inputs in ctx, runs the op on `backend` (whose memory is host memory,
// as ctx's is) and returns the named outputs.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using OpCase = std::function<NamedTensors(Backend& backend, Context& ctx, DType dtype)>;

// How many elements of the case's outputs on `tested` are out of tolerance against the reference
// backend, and the first of them.
struct Mismatch {
  std::int64_t count = 0;
  std::string first;  // "<output>[i]: tested <a>, reference <b>"
};

inline Mismatch compare_with_reference(Backend& tested, Context& tested_ctx, const OpCase& op,
                                       DType dtype) {
  Context reference_ctx(0, Device::reference());
  const NamedTensors got = op(tested, tested_ctx, dtype);
  const NamedTensors want = op(reference_ctx.backend(), reference_ctx, dtype);
  Mismatch m;
  const double tol = reference_tolerance(dtype);
  for (std::size_t t = 0; t < want.size(); ++t) {
    const std::vector<double> a = got.at(t).second.to_vector(), b = want[t].second.to_vector();
    if (a.size() != b.size()) {
      m.count += 1;
      if (m.first.empty()) m.first = want[t].first + ": size " + std::to_string(a.size());
      continue;
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
      if (both_nan || std::abs(a[i] - b[i]) <= tol * (1.0 + std::abs(b[i]))) continue;
      if (m.count++ == 0) {
        m.first = want[t].first + "[" + std::to_string(i) + "]: tested " + std::to_string(a[i]) +
                  ", reference " + std::to_string(b[i]);
      }
    }
  }
  return m;
}

}  // namespace shardscope::testing
