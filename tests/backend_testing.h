// What the tests parameterised by backend share: the parameter (cpu or cuda) and its names in
// test names ("Backends/OpsForward.SoftmaxIsStableForLargeScores/cuda"), the skip of a cuda
// instance that names what is missing (no CUDA backend in this build, no driver, too few devices,
// no NCCL), a fixture whose Context is on the parameter's device, and a finite-difference check
// for inputs on a device (gradcheck itself takes CPU tensors only). tests/CMakeLists.txt gives
// every test whose parameter name ends in "cuda" the label gpu.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <ostream>
#include <string>
#include <vector>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/gradcheck.h"
#include "autograd/tensor.h"
#include "parallel/comm/gpu_info.h"

namespace shardscope::testing {

enum class TestBackend { cpu, cuda };

inline const char* backend_name(TestBackend backend) {
  return backend == TestBackend::cpu ? "cpu" : "cuda";
}

// What gtest prints for the parameter ("# GetParam() = cuda" in `ctest -N`).
inline void PrintTo(TestBackend backend, std::ostream* out) {
  *out << backend_name(backend);
}

// The name of an instance: "cpu" or "cuda". CMake's label rule matches the trailing "cuda".
struct BackendName {
  std::string operator()(const ::testing::TestParamInfo<TestBackend>& info) const {
    return backend_name(info.param);
  }
};

inline auto all_backends() {
  return ::testing::Values(TestBackend::cpu, TestBackend::cuda);
}

// The device of a single-device test: cuda:0 or the CPU.
inline Device device_of(TestBackend backend) {
  return backend == TestBackend::cuda ? Device::cuda(0) : Device::cpu();
}

// "needs 2 CUDA devices, found 0: <why>": the skip message of a test that wants `needed` devices.
inline std::string too_few_devices(int needed, int found, const std::string& why) {
  return "needs " + std::to_string(needed) + " CUDA device" + (needed == 1 ? "" : "s") +
         ", found " + std::to_string(found) + ": " + why;
}

// What keeps `backend` from running a test on `needed` CUDA devices of this process; "" when
// nothing does (and always for cpu). In a build without CUDA the reason is make_backend's own
// error ("... this build has no CUDA backend (configure with -DSHARDSCOPE_CUDA=ON ...)").
inline std::string missing_devices(TestBackend backend, int needed = 1) {
  if (backend == TestBackend::cpu) return "";
  if (!cuda_backend_built()) {
    try {
      make_backend(Device::cuda(0));
    } catch (const std::exception& e) {
      return too_few_devices(needed, 0, e.what());
    }
    return too_few_devices(needed, 0, "this build has no CUDA backend");
  }
  std::string why;
  const int found = cuda_device_count(&why);
  return found >= needed ? "" : too_few_devices(needed, found, why);
}

// The same for a parallel run on `degree` ranks: on cuda they are threads sharing the visible
// devices (rank r on cuda:(r mod count)) with their collectives staged through host memory
// (parallel/comm/host_staging_comm.h), so one CUDA device serves any degree. Only tests/nccl needs
// a device per rank (tests/nccl/nccl_testing.h).
inline std::string missing_for_ranks(TestBackend backend, int /*degree*/) {
  return missing_devices(backend, 1);
}

// Skips the current test (from SetUp or the body) when `missing` is not empty.
#define SHARDSCOPE_SKIP_IF_MISSING(missing)            \
  do {                                                 \
    const std::string shardscope_missing_ = (missing); \
    if (!shardscope_missing_.empty()) {                \
      GTEST_SKIP() << shardscope_missing_;             \
    }                                                  \
  } while (0)

// The backend's device. When that device is missing the fixture below gets a CPU stand-in, which
// no test body sees: SetUp skips the test first (constructing a CUDA Context would throw).
inline Device device_or_stand_in(TestBackend backend) {
  return missing_devices(backend).empty() ? device_of(backend) : Device::cpu();
}

// A fixture whose `ctx` is on the parameter's device (the CPU or cuda:0), instantiated with
// INSTANTIATE_TEST_SUITE_P(Backends, Suite, all_backends(), BackendName()).
class BackendTest : public ::testing::TestWithParam<TestBackend> {
 protected:
  void SetUp() override { SHARDSCOPE_SKIP_IF_MISSING(missing_devices(GetParam())); }

  Context ctx{0, device_or_stand_in(GetParam())};
};

}  // namespace shardscope::testing
