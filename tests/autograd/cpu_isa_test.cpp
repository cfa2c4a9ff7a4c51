// The instruction-set level of the CPU backend's loops (SHARDSCOPE_CPU_ISA): the level this CPU
// reports agrees with the backend's own CPUID reading of AVX-512, and the check that make_backend
// runs refuses exactly the CPUs below the built level, naming both levels and the setting that
// would fit.
#include <gtest/gtest.h>

#include <string>

#include "autograd/context.h"
#include "autograd/cpu/x86_features.h"
#include "autograd/cpu/x86_level.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

TEST(CpuIsa, TheLevelAgreesWithTheBackendsCpuidReading) {
  const int level = cpu::x86_level();
#if defined(__x86_64__)
  EXPECT_GE(level, 1);
  EXPECT_LE(level, 4);
  // x86-64-v4 includes AVX512F; below it a CPU may still have AVX512F alone, never the reverse.
  if (level == 4) {
    EXPECT_TRUE(cpu::cpu_has_avx512f());
  }
  if (!cpu::cpu_has_avx512f()) {
    EXPECT_LT(level, 4);
  }
#else
  EXPECT_EQ(level, 0);
#endif
}

TEST(CpuIsa, ACpuBelowTheBuiltLevelIsRefusedByName) {
  try {
    cpu::check_cpu_isa(4, 3);
    FAIL() << "a v3 CPU ran v4 loops";
  } catch (const StateError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("use x86-64-v4 instructions"), std::string::npos) << m;
    EXPECT_NE(m.find("this CPU is x86-64-v3"), std::string::npos) << m;
    EXPECT_NE(m.find("SHARDSCOPE_CPU_ISA=x86-64-v3"), std::string::npos) << m;
  }
  try {
    cpu::check_cpu_isa(2, 0);
    FAIL() << "a CPU that is not x86-64 ran x86-64-v2 loops";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("not x86-64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cpu::check_cpu_isa(3, 1), StateError);
}

TEST(CpuIsa, ACpuAtOrAboveTheBuiltLevelOrABaselineBuildPasses) {
  for (int built = 0; built <= 4; ++built) {
    for (int running = built > 1 ? built : 0; running <= 4; ++running) {
      EXPECT_NO_THROW(cpu::check_cpu_isa(built, running)) << built << " on " << running;
    }
  }
  // And the check this build runs passes on the machine that runs the tests (a CPU backend).
  EXPECT_NO_THROW(Context(0, Device::cpu()));
}

}  // namespace
}  // namespace shardscope
