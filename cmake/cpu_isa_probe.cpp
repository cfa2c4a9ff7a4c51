// Prints the x86-64 level of the machine running it (1 to 4, 0 off x86-64):
// SHARDSCOPE_CPU_ISA=native (cmake/ShardscopeOptions.cmake) runs it at configure time.
#include <cstdio>

#include "autograd/cpu/x86_level.h"

int main() {
  std::printf("%d\n", shardscope::cpu::x86_level());
}
