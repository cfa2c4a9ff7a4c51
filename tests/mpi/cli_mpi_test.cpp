// `mpiexec -n 4 shardscope run --comm mpi` against the same run on threads, in every parallel
// mode: the communication and memory figures are identical, both checks pass, and the losses
// agree to f32 rounding (MPI may sum a reduction in another order than ThreadComm's rank order,
// which moves the last bits of the errors and losses). And `--inject-fault` under mpiexec: every
// kind ends the job with exit code 1 and a message naming the rank and the op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/apps/cli_testing.h"
#include "tests/temp_path.h"

namespace {

using shardscope::testing::Result;
using shardscope::testing::run_shell;

nlohmann::json load(const std::filesystem::path& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

TEST(CliMpi, ReportsEqualTheThreadsRunInEveryMode) {
  const shardscope::testing_files::ScratchPath dir("cli_mpi",
                                                   shardscope::testing_files::ScratchPath::folder);
  for (const char* mode : {"tp", "tp-sp", "ulysses"}) {
    SCOPED_TRACE(mode);
    const std::string args = std::string(" run --mode ") + mode +
                             " --degree 4 --seq 16 --batch 2 --hidden 32 --heads 4 --steps 2";
    const auto threads = dir / (std::string(mode) + "-threads.json");
    const auto mpi = dir / (std::string(mode) + "-mpi.json");
    // On failure the runs' output is in the message (a failure under load must say why).
    const Result on_threads =
        run_shell(std::string(SHARDSCOPE_EXE) + args + " --report " + threads.string());
    ASSERT_EQ(on_threads.exit_code, 0) << on_threads.output;
    const Result on_mpi = run_shell(std::string(SHARDSCOPE_MPIEXEC) + " " + SHARDSCOPE_EXE + args +
                                    " --comm mpi --report " + mpi.string());
    ASSERT_EQ(on_mpi.exit_code, 0) << on_mpi.output;
    const nlohmann::json a = load(threads), b = load(mpi);
    EXPECT_EQ(b["config"]["comm"], "mpi");
    EXPECT_TRUE(b["check"]["passed"].get<bool>());
    ASSERT_EQ(a["check"]["tensors"].size(), b["check"]["tensors"].size());
    for (std::size_t i = 0; i < a["check"]["tensors"].size(); ++i) {
      EXPECT_EQ(a["check"]["tensors"][i]["name"], b["check"]["tensors"][i]["name"]);
      EXPECT_TRUE(b["check"]["tensors"][i]["passed"].get<bool>());
    }
    EXPECT_EQ(a["memory"], b["memory"]);
    EXPECT_EQ(a["comm"], b["comm"]);
    ASSERT_EQ(a["steps"].size(), b["steps"].size());
    for (std::size_t i = 0; i < a["steps"].size(); ++i) {
      const double la = a["steps"][i]["loss"].get<double>(),
                   lb = b["steps"][i]["loss"].get<double>();
      EXPECT_NEAR(la, lb, 1e-6 * std::abs(la));
    }
  }
}

// Each kind of fault on rank 2 of 4 processes ends the job through MPI_Abort with exit code 1
// (not mpiexec --timeout's kill) and the failing rank's message. A hang has no communicator
// timeout to end it under MPI: rank 2 sleeps 15 s (the default 10 s timeout plus half) and its
// own throw then ends the job.
TEST(CliMpi, EveryInjectedFaultEndsTheJobWithTheRankAndTheOp) {
  struct Case {
    const char* plan;
    std::vector<std::string> expected;
  };
  const Case cases[] = {
      {"rank=2,at=all_gather",
       {"shardscope: rank 2 failed: injected fault on rank 2 at all_gather"}},
      {"rank=2,at=matmul,kind=throw",
       {"shardscope: rank 2 failed: injected fault on rank 2 at matmul (op 'matmul'"}},
      {"rank=2,at=all_gather,kind=wrong-size",
       {"injected fault: rank 2 runs all_gather(count 256, f32)", "collective mismatch",
        "rank 2 calls all_gather(count 255, f32)"}},
      {"rank=2,at=reduce_scatter_seq,kind=skip-collective",
       {"injected fault: rank 2 skips reduce_scatter(", "failed: "}},
      {"rank=2,at=all_gather,kind=hang",
       {"injected fault: rank 2 hangs instead of running all_gather",
        "shardscope: rank 2 failed: injected hang on rank 2 at all_gather ended after"}},
      {"rank=2,at=all_to_all",
       {"shardscope: rank 2 failed: injected fault: rank 2 never reached all_to_all"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.plan);
    const Result o = run_shell(
        std::string(SHARDSCOPE_MPIEXEC) + " " + SHARDSCOPE_EXE +
        " run --comm mpi --mode tp-sp --degree 4 --seq 16 --batch 2 --hidden 32 --heads 4 "
        "--steps 1 --inject-fault " +
        c.plan);
    EXPECT_EQ(o.exit_code, 1) << o.output;
    for (const std::string& part : c.expected) EXPECT_THAT(o.output, ::testing::HasSubstr(part));
  }
}

}  // namespace
