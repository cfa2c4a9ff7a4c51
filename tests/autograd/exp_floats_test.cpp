// cpu::exp_float (autograd/cpu/exp_floats.h), the CPU backend's vectorised f32 exp, against
// std::exp in double (the exact value to f32): within 1.5 ulp (0.97 measured) over the whole range
// of normal results, subnormal results to within 2 units of the least subnormal, exact limits
// (+inf, 0, 1 at 0) and NaN passed through; the loop this CPU runs (exp_floats' clone for it)
// within the same bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/cpu/exp_floats.h"

namespace shardscope {
namespace {

// |got - want| in units of the last place of want (an f32 of want's binade).
double ulps(float got, double want) {
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
  return std::abs(static_cast<double>(got) - want) / ulp;
}

TEST(ExpFloats, WithinOneAndAHalfUlpOfExactOverEveryNormalResult) {
  // ln(FLT_MIN) = -87.34 .. ln(FLT_MAX) = 88.72, a million points and the ends.
  double worst = 0, where = 0;
  const int points = 1000000;
  for (int i = 0; i <= points; ++i) {
    const float x = static_cast<float>(-87.33 + (88.72 + 87.33) * i / points);
    const double e = ulps(cpu::exp_float(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, where = x;
  }
  EXPECT_LE(worst, 1.5) << "at x = " << where;
}

TEST(ExpFloats, SubnormalResultsLimitsAndNaN) {
  const float least = std::numeric_limits<float>::denorm_min();
  for (float x = -103.9f; x < -87.4f; x += 0.01f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_LE(std::abs(static_cast<double>(cpu::exp_float(x)) - want), 2.0 * least) << x;
  }
  EXPECT_EQ(cpu::exp_float(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_float(88.8f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::exp_float(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::exp_float(-104.0f), 0.0f);
  EXPECT_EQ(cpu::exp_float(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(cpu::exp_float(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_LT(cpu::exp_float(88.72f), std::numeric_limits<float>::infinity());
  // Either side of ln(FLT_MAX) = 88.7228391: the largest finite result, then +inf from the
  // product itself (below the clamp at 89).
  const float below = 88.72283172607421875f;  // the float before 88.72283935546875
  EXPECT_LT(cpu::exp_float(below), std::numeric_limits<float>::infinity());
  EXPECT_GT(cpu::exp_float(below), 0.99f * std::numeric_limits<float>::max());
  EXPECT_EQ(cpu::exp_float(std::nextafter(88.72283935546875f, 100.0f)),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::exp_float(88.99f), std::numeric_limits<float>::infinity());
}

TEST(ExpFloats, TheLoopThisCpuRunsIsAsCloseToExact) {
  // exp_floats runs the clone for this CPU (with FMA where it has it): the same bound, the same
  // limits.
  std::vector<float> v;
  for (int i = -1688; i <= 1716; ++i) v.push_back(static_cast<float>(i) * 0.0517f);  // normal
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  v.push_back(100.0f);
  v.push_back(-200.0f);
  std::vector<float> looped = v;
  cpu::exp_floats(looped.data(), static_cast<std::int64_t>(looped.size()));
  for (std::size_t i = 0; i + 3 < v.size(); ++i) {
    EXPECT_LE(ulps(looped[i], std::exp(static_cast<double>(v[i]))), 1.5) << "x = " << v[i];
  }
  EXPECT_TRUE(std::isnan(looped[v.size() - 3]));
  EXPECT_EQ(looped[v.size() - 2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(looped[v.size() - 1], 0.0f);
}

}  // namespace
}  // namespace shardscope
