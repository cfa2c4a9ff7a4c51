// The CUDA module (libshardscope_cuda.so) is loaded only when asked for: a CPU layer step leaves
// the CUDA runtime, cuBLAS and NCCL out of the process; asking for a CUDA backend loads the module
// (or fails with its load error, which names the file); a missing module or entry is an error
// naming the path. A binary of its own, so that no other test has loaded the module first (ctest
// runs each test in a process of its own; run whole, the tests run in the order below).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/cuda/cuda_backend.h"
#include "autograd/cuda/cuda_module.h"
#include "autograd/errors.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// The file names of the loaded objects that are the CUDA module or a library it brings in.
std::vector<std::string> loaded_cuda_libraries() {
  std::vector<std::string> found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        const std::string name = std::filesystem::path(info->dlpi_name).filename().string();
        for (const char* prefix : {"libcudart", "libcublas", "libnccl", "libshardscope_cuda"}) {
          if (name.rfind(prefix, 0) == 0) {
            static_cast<std::vector<std::string>*>(out)->push_back(name);
          }
        }
        return 0;
      },
      &found);
  return found;
}

// One training step of the single-device layer on the CPU, through run_spmd as `shardscope run
// --mode single` does; returns the steps it recorded.
std::size_t run_cpu_layer_step() {
  LayerRunSpec spec;
  spec.layer.seq = 8;
  spec.layer.batch = 2;
  spec.layer.hidden = 16;
  spec.layer.heads = 2;
  spec.steps = 1;
  std::size_t steps = 0;
  std::mutex mutex;
  run_spmd(1, SpmdOptions{}, [&](RankEnv& env) {
    const RankRun run = run_layer_rank(env, spec);
    std::lock_guard<std::mutex> lock(mutex);
    steps = run.steps.size();
  });
  return steps;
}

TEST(CudaModule, CpuLayerStepLoadsNoCudaLibrary) {
  EXPECT_THAT(loaded_cuda_libraries(), IsEmpty()) << "loaded before the run";
  EXPECT_EQ(run_cpu_layer_step(), 1u);
  // Asking whether the CPU backend is a CUDA one needs no module either.
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  EXPECT_THROW(cuda_memory_stats(*cpu), ArgumentError);
  EXPECT_THROW(cuda_backend_stream(*cpu), ArgumentError);
  EXPECT_THAT(loaded_cuda_libraries(), IsEmpty()) << "loaded by a CPU run";
}

TEST(CudaModule, AskingForACudaBackendLoadsTheModule) {
  std::string error;
  try {
    make_cuda_backend(0);
  } catch (const Error& e) {
    error = e.what();
  }
  const std::vector<std::string> loaded = loaded_cuda_libraries();
  if (!cuda_backend_built()) {
    EXPECT_THAT(error, HasSubstr("this build has no CUDA backend"));
    EXPECT_THAT(loaded, IsEmpty());
  } else if (std::find(loaded.begin(), loaded.end(), kCudaModuleFile) != loaded.end()) {
    EXPECT_THAT(loaded, Contains(StartsWith("libcudart.so")));
    EXPECT_THAT(loaded, Contains(StartsWith("libcublas.so")));
    EXPECT_THAT(loaded, Contains(StartsWith("libcublasLt.so")));
  } else {  // the module or a library it needs is missing on this machine
    EXPECT_THAT(error,
                AllOf(StartsWith("no backend for device cuda:0: cannot load the CUDA module " +
                                 cuda_module_path() + ": "),
                      HasSubstr("cannot open shared object file")));
  }
  // The device count answers with a reason instead of throwing, module or not.
  std::string why;
  const int count = cuda_device_count(&why);
  EXPECT_TRUE(count > 0 || !why.empty()) << "no device and no reason";
}

TEST(CudaModule, MissingModuleIsAnErrorNamingThePath) {
  const std::string path = ::testing::TempDir() + "no-such-folder/" + kCudaModuleFile;
  try {
    open_cuda_module_entry(path, kCudaAutogradEntry);
    ADD_FAILURE() << "loading " << path << " must fail";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), StartsWith("cannot load the CUDA module " + path + ": " + path +
                                     ": cannot open shared object file"));
    EXPECT_THAT(e.what(), HasSubstr(kCudaModuleVariable));
  }
}

TEST(CudaModule, LibraryWithoutTheEntryIsAnErrorNamingIt) {
  try {
    open_cuda_module_entry("libm.so.6", kCudaAutogradEntry);
    ADD_FAILURE() << "libm.so.6 has no " << kCudaAutogradEntry;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), StartsWith("cannot load the CUDA module libm.so.6: it has no entry " +
                                     std::string(kCudaAutogradEntry) + ": "));
  }
}

TEST(CudaModule, PathIsTheVariableOrBesideTheAutogradLibrary) {
  ASSERT_EQ(setenv(kCudaModuleVariable, "/somewhere/else.so", 1), 0);
  EXPECT_EQ(cuda_module_path(), "/somewhere/else.so");
  ASSERT_EQ(unsetenv(kCudaModuleVariable), 0);
  const std::filesystem::path path = cuda_module_path();
  EXPECT_EQ(path.filename(), kCudaModuleFile);
  EXPECT_TRUE(std::filesystem::exists(path.parent_path() / "libshardscope_autograd.so")) << path;
  if (cuda_backend_built()) {
    EXPECT_TRUE(std::filesystem::exists(path)) << "not built: " << path;
  }
}

}  // namespace
}  // namespace shardscope
