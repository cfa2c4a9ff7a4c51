// The reference backend's own bf16 and f16 element types, written from the formats' definitions
// with the math library rather than with the bit tricks of autograd/kernels/half.h, so that a
// wrong rounding there shows as a difference against this backend.
//   A number of precision p bits and smallest normal exponent e_min is q k for an integer k, with
//   q = 2^(max(e, e_min) - (p - 1)) and e the exponent of the value (frexp). Rounding to nearest
//   even is then nearbyint(d / q) q (d / q is exact: q is a power of two); a result above the
//   largest finite value is Inf.
//   bf16: p = 8, e_min = -126, largest (2 - 2^-7) 2^127;  f16: p = 11, e_min = -14, largest 65504.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace shardscope::reference {

// d rounded to nearest even at precision p with smallest normal exponent e_min, Inf past
// `largest`; NaN and Inf unchanged.
inline double round_to_format(double d, int p, int e_min, double largest) {
  if (!std::isfinite(d) || d == 0.0) return d;
  int e = 0;
  std::frexp(d, &e);  // d = f 2^e, 0.5 <= |f| < 1: the value's exponent is e - 1
  const double quantum = std::ldexp(1.0, std::max(e - 1, e_min) - (p - 1));
  const double r = std::nearbyint(d / quantum) * quantum;  // the default mode: ties to even
  if (std::fabs(r) > largest) return std::copysign(std::numeric_limits<double>::infinity(), d);
  return r;
}

// bf16: the upper 16 bits of the f32 holding the (exactly representable) rounded value.
struct Bf16 {
  std::uint16_t bits = 0;

  Bf16() = default;
  static Bf16 from(std::uint16_t b) {
    Bf16 out;
    out.bits = b;
    return out;
  }
  template <class Number, class = std::enable_if_t<std::is_arithmetic_v<Number>>>
  explicit Bf16(Number v) {
    const double d = static_cast<double>(v);
    if (std::isnan(d)) {
      bits = 0x7fc0;
      return;
    }
    const auto f = static_cast<float>(round_to_format(d, 8, -126, 0x1.fep127));  // exact
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    bits = static_cast<std::uint16_t>(u >> 16);
  }
  operator double() const {
    const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// f16: sign, 5 exponent bits (bias 15), 10 fraction bits; exponent field 0 holds the subnormals
// k 2^-24, field 31 Inf and NaN.
struct F16 {
  std::uint16_t bits = 0;

  F16() = default;
  static F16 from(std::uint16_t b) {
    F16 out;
    out.bits = b;
    return out;
  }
  template <class Number, class = std::enable_if_t<std::is_arithmetic_v<Number>>>
  explicit F16(Number v) {
    const double d = static_cast<double>(v);
    const std::uint16_t sign = std::signbit(d) ? 0x8000 : 0;
    if (std::isnan(d)) {
      bits = 0x7e00;
      return;
    }
    const double r = std::fabs(round_to_format(d, 11, -14, 65504.0));
    if (std::isinf(r)) {
      bits = static_cast<std::uint16_t>(sign | 0x7c00);
    } else if (r < 0x1p-14) {  // subnormal or zero: k 2^-24
      bits = static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::ldexp(r, 24)));
    } else {
      const int e = std::ilogb(r);  // 1.f 2^e
      const auto fraction = static_cast<std::uint16_t>(std::ldexp(r, 10 - e) - 1024.0);
      bits = static_cast<std::uint16_t>(sign | ((e + 15) << 10) | fraction);
    }
  }
  operator double() const {
    const int field = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
    const double sign = (bits & 0x8000) ? -1.0 : 1.0;
    if (field == 31) {
      return fraction ? std::numeric_limits<double>::quiet_NaN()
                      : sign * std::numeric_limits<double>::infinity();
    }
    if (field == 0) return sign * std::ldexp(fraction, -24);
    return sign * std::ldexp(1024 + fraction, field - 25);  // (1 + fraction / 2^10) 2^(field - 15)
  }
};

// The element type of a norm's saved statistics (mean, rstd) for rows of T: f32 for the 2-byte
// types (statistics_dtype in dtype.h), T otherwise.
template <class T>
using statistic_t = std::conditional_t<std::is_same_v<T, Bf16> || std::is_same_v<T, F16>, float, T>;

}  // namespace shardscope::reference
