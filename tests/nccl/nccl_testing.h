// What the NCCL tests share: the skip when there are too few CUDA devices, which names what is
// missing (a test that cannot run never passes silently).
#pragma once

#include <gtest/gtest.h>

#include "parallel/comm/gpu_info.h"

// Skips the current test unless `n` CUDA devices are visible.
#define SHARDSCOPE_SKIP_WITHOUT_DEVICES(n)                                                         \
  do {                                                                                             \
    const ::shardscope::CudaDeviceCount found_devices = ::shardscope::count_cuda_devices();        \
    if (found_devices.count < (n)) {                                                               \
      GTEST_SKIP() << "needs " << (n) << " CUDA device" << ((n) == 1 ? "" : "s") << ", found "     \
                   << found_devices.count                                                          \
                   << (found_devices.why_none.empty() ? "" : " (" + found_devices.why_none + ")"); \
    }                                                                                              \
  } while (0)
