// Where the NCCL ranks of one node go when ranks are MPI processes (nccl_devices_on_node): pure
// arithmetic over what each process's CUDA runtime reports, so it runs without a GPU.
#include "parallel/comm/gpu_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace shardscope {
namespace {

using ::testing::HasSubstr;

std::vector<CudaDeviceCount> seeing(const std::vector<int>& counts) {
  std::vector<CudaDeviceCount> seen;
  for (int count : counts) seen.push_back({count, count ? "" : "cudaErrorNoDevice: no device"});
  return seen;
}

// CUDA_VISIBLE_DEVICES per local rank or `srun --gpus-per-task=1`: each process sees only its own
// GPU, as its device 0.
TEST(NcclDevicesOnNode, EachProcessSeeingOneDeviceUsesItsDeviceZero) {
  EXPECT_EQ(nccl_devices_on_node("gpu7", seeing({1, 1, 1, 1})), std::vector<int>({0, 0, 0, 0}));
  EXPECT_EQ(nccl_devices_on_node("gpu7", seeing({1})), std::vector<int>({0}));
}

TEST(NcclDevicesOnNode, ProcessesSharingTheNodesDevicesTakeOneEachByLocalRank) {
  EXPECT_EQ(nccl_devices_on_node("gpu7", seeing({4, 4, 4, 4})), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(nccl_devices_on_node("gpu7", seeing({8, 8})), std::vector<int>({0, 1}));
}

TEST(NcclDevicesOnNode, TooFewDevicesNamesTheNodeTheRankAndTheCounts) {
  try {
    nccl_devices_on_node("gpu7", seeing({2, 2, 2, 2}));
    ADD_FAILURE() << "4 processes cannot share 2 devices";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("on node gpu7 (4 ranks there; local rank 0) needs 4 CUDA "
                                    "devices, found 2"));
    EXPECT_THAT(e.what(), HasSubstr("CUDA_VISIBLE_DEVICES per local rank"));
  }
  // One process sees one device, another sees two: neither rule fits.
  try {
    nccl_devices_on_node("gpu3", seeing({2, 1}));
    ADD_FAILURE() << "a process seeing one device cannot share it by local rank";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("on node gpu3 (2 ranks there; local rank 1) needs 2 CUDA "
                                    "devices, found 1"));
  }
}

TEST(NcclDevicesOnNode, NoDeviceGivesTheRuntimesReason) {
  try {
    nccl_devices_on_node("cpu1", seeing({0}));
    ADD_FAILURE() << "no device is no placement";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("node cpu1 (1 rank there; local rank 0) needs 1 CUDA device, "
                                    "found 0 (cudaErrorNoDevice: no device)"));
  }
}

}  // namespace
}  // namespace shardscope
