// check_memory_fits: a run whose estimated memory exceeds what is available is refused with one
// line naming the estimate; /proc/meminfo's MemAvailable is read in bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "apps/memory_check.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

TEST(MemoryCheck, MemAvailableIsReadInBytes) {
  EXPECT_EQ(mem_available_bytes("MemTotal:       16318412 kB\nMemFree:          932380 kB\n"
                                "MemAvailable:    7340032 kB\nBuffers:          1 kB\n"),
            7340032.0 * 1024);
  EXPECT_EQ(mem_available_bytes("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_TRUE(mem_available_bytes().has_value()) << "this machine's /proc/meminfo";
}

TEST(MemoryCheck, ARunThatCannotFitIsRefusedNamingTheEstimate) {
  RunOptions o;  // the command line's defaults: s=64 b=2 h=128, a few MiB
  const double gib = 1024.0 * 1024.0 * 1024.0;
  EXPECT_NO_THROW(check_memory_fits(o, 1 * gib));
  o.spec.layer.seq = 8192;  // the attention scores: 4 x 8192^2 x 2 x 4 bytes, 2 GiB and more
  o.spec.layer.mode = ParallelMode::tp;
  o.spec.layer.degree = 2;
  try {
    check_memory_fits(o, 1 * gib);
    ADD_FAILURE() << "not refused";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the run needs at least "));
    EXPECT_THAT(e.what(), HasSubstr("2 rank(s) of "));
    EXPECT_THAT(e.what(), HasSubstr("and the single-device reference"));
    EXPECT_THAT(e.what(), HasSubstr("and 1.0 GiB is available (MemAvailable)"));
    EXPECT_THAT(e.what(), HasSubstr("or run the ranks as processes (--comm mpi)"));
  }
  EXPECT_NO_THROW(check_memory_fits(o, 1024 * gib));
  EXPECT_NO_THROW(check_memory_fits(o, std::nullopt)) << "unknown: not checked";
  o.backend = DeviceKind::cuda;
  EXPECT_NO_THROW(check_memory_fits(o, 1 * gib)) << "the tensors live on the GPUs";
}

}  // namespace
}  // namespace shardscope
