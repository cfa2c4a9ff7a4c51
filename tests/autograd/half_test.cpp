// The 2-byte dtypes bf16 and f16: the conversions of autograd/kernels/half.h (every bit pattern,
// every midpoint, known values, against the reference backend's math-library rounding), tensor
// creation and read-out, the numerical guard, and the ledger's 2-byte accounting.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/context.h"
#include "autograd/kernels/half.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/reference/reference_half.h"
#include "autograd/tensor.h"

namespace shardscope {
namespace {

using kernels::bf16_bits_from;
using kernels::f16_bits_from;
using kernels::float_from_bf16_bits;
using kernels::float_from_f16_bits;

// The two formats behind one interface, for tests that run over both.
struct Format {
  const char* name;
  float (*to_float)(std::uint16_t);
  std::uint16_t (*from_float)(float);
  std::uint16_t (*from_double)(double);
  std::uint16_t (*reference_from_double)(double);
  std::uint16_t infinity;  // +Inf's bits
};

const Format kFormats[] = {
    {"bf16", float_from_bf16_bits, bf16_bits_from<float>, bf16_bits_from<double>,
     [](double d) { return reference::Bf16(d).bits; }, 0x7f80},
    {"f16", float_from_f16_bits, f16_bits_from<float>, f16_bits_from<double>,
     [](double d) { return reference::F16(d).bits; }, 0x7c00},
};

bool is_nan_bits(const Format& f, std::uint16_t b) {
  return (b & 0x7fff) > f.infinity;
}

TEST(HalfConversions, EveryBitPatternRoundTripsThroughFloatAndDouble) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    int mismatches = 0;
    for (std::uint32_t b = 0; b <= 0xffff; ++b) {
      const auto bits = static_cast<std::uint16_t>(b);
      const float v = f.to_float(bits);
      if (is_nan_bits(f, bits)) {
        // NaN stays NaN, through either path, with its sign.
        EXPECT_TRUE(std::isnan(v)) << std::hex << b;
        EXPECT_TRUE(is_nan_bits(f, f.from_float(v))) << std::hex << b;
        EXPECT_TRUE(is_nan_bits(f, f.from_double(v))) << std::hex << b;
        EXPECT_EQ(f.from_float(v) & 0x8000, bits & 0x8000) << std::hex << b;
        continue;
      }
      // Exact both ways: the value is representable, so no rounding may move it.
      mismatches += f.from_float(v) != bits;
      mismatches += f.from_double(static_cast<double>(v)) != bits;
      // The reference backend's independent decoding agrees on the value.
      const double reference_value = std::string(f.name) == "bf16"
                                         ? static_cast<double>(reference::Bf16::from(bits))
                                         : static_cast<double>(reference::F16::from(bits));
      mismatches += reference_value != static_cast<double>(v);
      mismatches += f.reference_from_double(v) != bits;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// Between every two adjacent finite values of one sign the midpoint rounds to the one with an even
// last bit, and a hair either side of it to the nearer one; past the largest finite value by half
// an ulp or more is Inf. Midpoints of both formats are exact in f32 (9 and 12 significant bits).
TEST(HalfConversions, EveryMidpointRoundsToEvenAndEverySideToTheNearer) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    int mismatches = 0;
    for (std::uint32_t sign : {0u, 0x8000u}) {
      for (std::uint32_t b = 0; b < f.infinity; ++b) {  // b and b + 1 (b + 1 may be Inf)
        const auto lo = static_cast<std::uint16_t>(sign | b);
        const auto hi = static_cast<std::uint16_t>(sign | (b + 1));
        const double a = f.to_float(lo);
        // The value half an ulp above lo; for the largest finite value, where "b + 1" is Inf,
        // that is lo + (lo - previous) / 2.
        const double next = b + 1 == f.infinity
                                ? a + (a - f.to_float(static_cast<std::uint16_t>(sign | (b - 1))))
                                : static_cast<double>(f.to_float(hi));
        const double mid = (a + next) / 2;
        const std::uint16_t even = (b & 1u) ? hi : lo;
        mismatches += f.from_float(static_cast<float>(mid)) != even;
        mismatches += f.from_double(mid) != even;
        mismatches += f.reference_from_double(mid) != even;
        const double below = std::nextafter(mid, a), above = std::nextafter(mid, next);
        mismatches += f.from_double(below) != lo;
        mismatches += f.from_double(above) != hi;
        mismatches += f.reference_from_double(below) != lo;
        mismatches += f.reference_from_double(above) != hi;
        // In f32 a hair is one f32 ulp, still on the same side of the midpoint.
        mismatches +=
            f.from_float(std::nextafter(static_cast<float>(mid), static_cast<float>(a))) != lo;
        mismatches +=
            f.from_float(std::nextafter(static_cast<float>(mid), static_cast<float>(next))) != hi;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(HalfConversions, KnownValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_bits_from(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits_from(-2.0f), 0xc000);
  EXPECT_EQ(bf16_bits_from(0.1), 0x3dcd);  // 0.1 = 0x3dcccccd in f32: up
  EXPECT_EQ(bf16_bits_from(3.14159265358979), 0x4049);
  EXPECT_EQ(bf16_bits_from(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits_from(inf), 0x7f80);
  EXPECT_EQ(bf16_bits_from(-inf), 0xff80);
  EXPECT_EQ(bf16_bits_from(std::numeric_limits<float>::max()), 0x7f80);  // past max + ulp/2
  EXPECT_EQ(bf16_bits_from(1e300), 0x7f80);
  EXPECT_EQ(bf16_bits_from(1e-300), 0x0000);
  EXPECT_EQ(bf16_bits_from(0x1p-133), 0x0001);  // the smallest subnormal
  EXPECT_EQ(float_from_bf16_bits(0x7f7f), 0x1.fep127f);
  EXPECT_TRUE(std::isnan(float_from_bf16_bits(bf16_bits_from(std::nanf("")))));
  // A NaN whose payload sits in the low 16 bits alone, which truncation would turn into Inf.
  EXPECT_TRUE(
      std::isnan(float_from_bf16_bits(bf16_bits_from(kernels::float_from_bits(0x7f800001u)))));

  EXPECT_EQ(f16_bits_from(1.0f), 0x3c00);
  EXPECT_EQ(f16_bits_from(-2.0f), 0xc000);
  EXPECT_EQ(f16_bits_from(0.1), 0x2e66);
  EXPECT_EQ(f16_bits_from(65504.0f), 0x7bff);  // the largest finite
  EXPECT_EQ(f16_bits_from(65519.996), 0x7bff);
  EXPECT_EQ(f16_bits_from(65520.0f), 0x7c00);  // the tie past it rounds to "even" Inf
  EXPECT_EQ(f16_bits_from(1e6f), 0x7c00);
  EXPECT_EQ(f16_bits_from(-1e6f), 0xfc00);
  EXPECT_EQ(f16_bits_from(0x1p-14f), 0x0400);  // the smallest normal
  EXPECT_EQ(f16_bits_from(0x1p-24f), 0x0001);  // the smallest subnormal
  EXPECT_EQ(f16_bits_from(0x1p-25f), 0x0000);  // a tie: to even, zero
  EXPECT_EQ(f16_bits_from(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f16_bits_from(0x1.8p-24f), 0x0002);       // 1.5 subnormal ulps: a tie, to even 2
  EXPECT_EQ(f16_bits_from(1023 * 0x1p-24f), 0x03ff);  // the largest subnormal
  EXPECT_EQ(f16_bits_from(1e-10), 0x0000);
  EXPECT_EQ(float_from_f16_bits(0x0001), 0x1p-24f);
  EXPECT_EQ(float_from_f16_bits(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(float_from_f16_bits(0x8000)));
  EXPECT_EQ(float_from_f16_bits(0x7c00), inf);
  EXPECT_TRUE(std::isnan(float_from_f16_bits(0x7c01)));
  EXPECT_TRUE(std::isnan(float_from_f16_bits(f16_bits_from(std::nan("")))));
}

// A double a hair above a midpoint of the 2-byte format, within half an f32 ulp of it: rounded to
// f32 first it lands on the midpoint, which then goes to even, the wrong way. Rounding once, as
// the conversion from double must, goes up.
TEST(HalfConversions, FromDoubleRoundsOnceNotTwice) {
  const double bf16_case = 1.0 + 0x1p-8 + 0x1p-30;  // midpoint of 1 and 1 + 2^-7, plus a hair
  EXPECT_EQ(bf16_bits_from(static_cast<float>(bf16_case)), 0x3f80) << "twice: down, to even";
  EXPECT_EQ(bf16_bits_from(bf16_case), 0x3f81);
  EXPECT_EQ(reference::Bf16(bf16_case).bits, 0x3f81);
  const double f16_case = 1.0 + 0x1p-11 + 0x1p-30;
  EXPECT_EQ(f16_bits_from(static_cast<float>(f16_case)), 0x3c00);
  EXPECT_EQ(f16_bits_from(f16_case), 0x3c01);
  EXPECT_EQ(reference::F16(f16_case).bits, 0x3c01);
  // And the same below a midpoint: rounded down once.
  EXPECT_EQ(bf16_bits_from(1.0 + 0x1p-7 + 0x1p-8 - 0x1p-30), 0x3f81);
}

// The bit tricks of kernels/half.h against the reference's frexp / nearbyint rounding on doubles
// spread over every binade of both formats, subnormals and overflow included.
TEST(HalfConversions, AgreeWithTheReferenceRoundingOnManyDoubles) {
  std::uint64_t z = 12345;
  int mismatches = 0;
  for (int i = 0; i < 400000; ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    const double mantissa = 1.0 + static_cast<double>(z >> 11) * 0x1p-53;
    const int exponent = static_cast<int>((z >> 3) % 300) - 150;  // 2^-150 .. 2^149
    const double d = ((z & 1) ? -1.0 : 1.0) * std::ldexp(mantissa, exponent);
    mismatches += bf16_bits_from(d) != reference::Bf16(d).bits;
    mismatches += f16_bits_from(d) != reference::F16(d).bits;
    const auto f = static_cast<float>(d);
    mismatches += bf16_bits_from(f) != reference::Bf16(f).bits;
    mismatches += f16_bits_from(f) != reference::F16(f).bits;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(HalfDTypes, SizesNamesAndKinds) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(dtype_name(DType::f16), "f16");
  EXPECT_TRUE(is_floating(DType::bf16) && is_floating(DType::f16));
  EXPECT_FALSE(is_floating(DType::u8));
  EXPECT_TRUE(is_half(DType::bf16) && is_half(DType::f16) && !is_half(DType::f32));
  EXPECT_EQ(statistics_dtype(DType::bf16), DType::f32);
  EXPECT_EQ(statistics_dtype(DType::f16), DType::f32);
  EXPECT_EQ(statistics_dtype(DType::f64), DType::f64);
}

// Values are rounded to the storage type once, when the tensor is made; reading them back is
// exact. On both host backends.
TEST(HalfTensors, CreationRoundsOnceAndReadOutIsExact) {
  for (Device device : {Device::cpu(), Device::reference()}) {
    Context ctx(0, device);
    for (DType dtype : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " on " + device.str());
      auto round = [&](double v) {
        return dtype == DType::bf16 ? static_cast<double>(float_from_bf16_bits(bf16_bits_from(v)))
                                    : static_cast<double>(float_from_f16_bits(f16_bits_from(v)));
      };
      const std::vector<double> values{0.1, -1.0 / 3.0, 1.0 + 0x1p-8 + 0x1p-30, 1e5, -7.0, 0.0};
      const Tensor t = Tensor::from_vector(ctx, {2, 3}, values, dtype);
      EXPECT_EQ(t.dtype(), dtype);
      EXPECT_EQ(t.bytes(), 12u);
      EXPECT_EQ(t.storage()->bytes(), 12u);
      const std::vector<double> got = t.to_vector();
      for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], round(values[i])) << i;
      EXPECT_EQ(Tensor::full(ctx, {3}, 0.1, dtype).to_vector(), std::vector<double>(3, round(0.1)));
      EXPECT_EQ(Tensor::from_vector(ctx, {}, {-1.0 / 3.0}, dtype).item(), round(-1.0 / 3.0));
      const std::vector<double> wide = Tensor::randn(ctx, {50}, 7, 2.0, DType::f64).to_vector();
      const std::vector<double> narrow = Tensor::randn(ctx, {50}, 7, 2.0, dtype).to_vector();
      for (std::size_t i = 0; i < wide.size(); ++i) EXPECT_EQ(narrow[i], round(wide[i])) << i;
      Context other(1, Device::cpu());
      const Tensor moved = t.copy_to(other);
      EXPECT_EQ(moved.dtype(), dtype);
      EXPECT_EQ(moved.to_vector(), got);
      EXPECT_EQ(t.clone().to_vector(), got);
      EXPECT_EQ(t.describe(), std::string(dtype_name(dtype)) + "[2, 3]");
    }
  }
}

TEST(HalfTensors, TheNumericalGuardSeesNaNAndInf) {
  Context ctx;
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor finite = Tensor::from_vector(ctx, {3}, {1.0, -2.0, 65504.0}, dtype);
    EXPECT_FALSE(count_non_finite(finite).any());
    const Tensor bad = Tensor::from_vector(ctx, {4}, {1.0, std::nan(""), 1e300, -1e300}, dtype);
    const NonFiniteCount c = count_non_finite(bad);
    EXPECT_EQ(c.nan, 1);
    EXPECT_EQ(c.inf, 2);
    EXPECT_EQ(c.first, 1);
    // f16 overflows at 65520: what is finite in bf16 is Inf there.
    const Tensor big = Tensor::from_vector(ctx, {1}, {1e5}, dtype);
    EXPECT_EQ(count_non_finite(big).inf, dtype == DType::f16 ? 1 : 0);
  }
}

// The ledger counts a storage's bytes: a bf16 activation 2 bytes an element. LayerNorm over bf16
// rows saves x (2 bytes an element) and keeps mean and rstd in f32 (statistics_dtype), 4 bytes a
// row each, counted as extras.
TEST(HalfTensors, TheLedgerCountsTwoBytesAnElementAndF32Statistics) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = Tensor::randn(ctx, {6, 10}, 1, 1.0, dtype).set_requires_grad(true);
    EXPECT_EQ(ledger.live(MemoryCategory::activation), 120u);
    const Tensor gamma = Tensor::parameter(Tensor::full(ctx, {10}, 1.0, dtype), "gamma");
    const Tensor beta = Tensor::parameter(Tensor::zeros(ctx, {10}, dtype), "beta");
    EXPECT_EQ(ledger.live(MemoryCategory::parameter), 40u);
    const Tensor y = layernorm(x, gamma, beta);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(ledger.saved_activation_bytes(), 120u);  // x: 60 elements, 2 bytes each
    EXPECT_EQ(ledger.extras_bytes(), 6u * 4 * 2);      // mean and rstd: 6 rows, f32
    const Tensor z = rmsnorm(x, gamma);
    EXPECT_EQ(ledger.extras_bytes(), 6u * 4 * 3);  // + rmsnorm's rstd
    sum(y).backward();
    sum(z).backward();
    EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
    EXPECT_EQ(ledger.extras_bytes(), 0u);
    EXPECT_EQ(x.grad().dtype(), dtype);
    EXPECT_EQ(x.grad().storage()->bytes(), 120u);
  }
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

}  // namespace
}  // namespace shardscope
