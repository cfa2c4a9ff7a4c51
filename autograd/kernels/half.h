// The two 2-byte floating types, written from their formats' definitions, and their roundings.
//   bf16 (brain float): 1 sign, 8 exponent (bias 127), 7 fraction bits: f32's upper half, the
//        same range, precision p = 8 (unit roundoff u = 2^-8).
//   f16 (IEEE 754 binary16): 1 sign, 5 exponent (bias 15), 10 fraction bits: p = 11 (u = 2^-11),
//        largest finite 65504, smallest normal 2^-14, subnormals down to 2^-24.
// Every conversion into them rounds to nearest, ties to even; values past the largest finite one
// (by half an ulp or more) become Inf, NaN stays NaN (quieted, sign and leading payload kept).
// Out of them every conversion is exact (each is a subset of f32).
//
// BFloat16 and Float16 are storage types: they convert implicitly to float and only explicitly
// from a number, and have no arithmetic of their own, so `a * b` is computed in f32 and a 2-byte
// accumulator (`T acc; acc += x`) does not compile. compute_t<T> is the type a kernel computes in
// for elements of type T: T itself for f32 and f64, f32 for the 2-byte types.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace shardscope::kernels {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float float_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f32 -> bf16 bits. bf16 keeps f32's upper 16 bits; the lower 16 decide the rounding: above
// 0x8000 up, below down, exactly 0x8000 (a tie) to the even upper half. Adding 0x7fff plus the
// kept half's last bit does that in one carry, which also carries into the exponent (and from the
// largest finite value to Inf) when the fraction overflows.
inline std::uint16_t bf16_bits_from_float(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, set the quiet bit
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  const std::uint32_t kept_lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + kept_lsb) >> 16);
}

inline float float_from_bf16_bits(std::uint16_t h) {
  return float_from_bits(static_cast<std::uint32_t>(h) << 16);
}

// f32 -> f16 bits.
inline std::uint16_t f16_bits_from_float(float f) {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: the quiet bit set, the top payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x03ffu));
  }
  const int exponent = static_cast<int>(magnitude >> 23) - 127;          // of f, unbiased
  if (exponent > 15) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 2^16: past 65520, Inf
  if (exponent >= -14) {
    // Normal in f16: exponent re-biased, 10 of the 23 fraction bits kept, the other 13 round.
    std::uint32_t h =
        (static_cast<std::uint32_t>(exponent + 15) << 10) | ((magnitude >> 13) & 0x3ffu);
    const std::uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry up to Inf: right
    return static_cast<std::uint16_t>(sign | h);
  }
  // Subnormal (or zero) in f16: a multiple of 2^-24. f = m 2^(exponent - 23) with the implicit
  // bit in m, so f / 2^-24 = m 2^(exponent + 1) = m >> shift, shift = -(exponent + 1) >= 14.
  // f32 subnormals (exponent -127) are far below 2^-25 and round to zero.
  const int shift = -(exponent + 1);
  if (shift > 24) return sign;  // below 2^-25: rounds to zero (exactly 2^-25 is shift 24)
  const std::uint32_t m = (magnitude & 0x7fffffu) | 0x800000u;
  std::uint32_t h = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // may become 0x400, the smallest normal
  return static_cast<std::uint16_t>(sign | h);
}

inline float float_from_f16_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (fraction << 13));
  if (exponent == 0) {  // zero or subnormal: fraction 2^-24, exact in f32
    const float magnitude = static_cast<float>(fraction) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  return float_from_bits(sign | ((exponent + 112u) << 23) | (fraction << 13));  // 112 = 127 - 15
}

// d rounded to f32 with round-to-odd: exact values unchanged, any other to whichever of its two
// f32 neighbours has an odd last bit. Rounding that to nearest at a precision of p <= 22 bits
// gives d rounded to nearest at p directly (an odd last bit, two or more places below p, marks a
// value that was not exact, so it never reads as a tie), where d -> f32 -> p by rounding to
// nearest twice can land on a tie that was not one. bf16 (p = 8)
// and f16 (p = 11, within f32's exponent range) both qualify.
inline float float_round_to_odd(double d) {
  const float nearest = static_cast<float>(d);
  if (d != d || static_cast<double>(nearest) == d) return nearest;  // NaN or exact
  std::uint32_t u = float_bits(nearest);
  const double rounded = static_cast<double>(nearest);
  if ((rounded < 0 ? -rounded : rounded) > (d < 0 ? -d : d)) --u;  // away from zero: step back
  return float_from_bits(u | 1u);
}

// A number converted to a 2-byte format's bits, rounded once to nearest even.
template <class Number>
std::uint16_t bf16_bits_from(Number v) {
  if constexpr (std::is_same_v<Number, float>) {
    return bf16_bits_from_float(v);
  } else {
    return bf16_bits_from_float(float_round_to_odd(static_cast<double>(v)));
  }
}

template <class Number>
std::uint16_t f16_bits_from(Number v) {
  if constexpr (std::is_same_v<Number, float>) {
    return f16_bits_from_float(v);
  } else {
    return f16_bits_from_float(float_round_to_odd(static_cast<double>(v)));
  }
}

struct BFloat16 {
  std::uint16_t bits = 0;

  BFloat16() = default;
  template <class Number, class = std::enable_if_t<std::is_arithmetic_v<Number>>>
  explicit BFloat16(Number v) : bits(bf16_bits_from(v)) {}
  static BFloat16 from_bits(std::uint16_t b) {
    BFloat16 out;
    out.bits = b;
    return out;
  }
  operator float() const { return float_from_bf16_bits(bits); }
};

struct Float16 {
  std::uint16_t bits = 0;

  Float16() = default;
  template <class Number, class = std::enable_if_t<std::is_arithmetic_v<Number>>>
  explicit Float16(Number v) : bits(f16_bits_from(v)) {}
  static Float16 from_bits(std::uint16_t b) {
    Float16 out;
    out.bits = b;
    return out;
  }
  operator float() const { return float_from_f16_bits(bits); }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2, "2-byte storage");
static_assert(std::is_trivially_copyable_v<BFloat16> && std::is_trivially_copyable_v<Float16>);

// The type a kernel computes in for elements of type T (see the top of the file).
template <class T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <>
struct ComputeType<Float16> {
  using type = float;
};
template <class T>
using compute_t = typename ComputeType<T>::type;

// Whether T is one of the 2-byte storage types.
template <class T>
constexpr bool is_half_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

}  // namespace shardscope::kernels
