// exp_floats: the vectorised loop, one clone per x86 level (GCC's target_clones picks the best
// the CPU has when the library loads). Compiled with -fno-trapping-math (autograd/CMakeLists.txt):
// without it GCC keeps exp_float's clamps and NaN test as branches and leaves the loop scalar;
// no value changes.
#include "autograd/cpu/exp_floats.h"

namespace shardscope::cpu {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void exp_floats(float* v, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) v[j] = exp_float(v[j]);
}

}  // namespace shardscope::cpu
