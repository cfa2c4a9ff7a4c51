// The command line's errors before the work (issue 19 §2): a --load dump of another layer, a loss
// that becomes NaN, a lab filter that matches nothing, a misspelt flag and the like each end with
// one line naming the cause and what to type instead, before (or instead of) a run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/apps/cli_testing.h"

namespace {

using shardscope::testing::count_lines;
using shardscope::testing::Result;
using shardscope::testing::run_cli;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kFixture = std::string(SHARDSCOPE_SOURCE_DIR) + "/tests/fixtures/torch/";

TEST(CliErrors, LoadOfAnotherLayerExitsTwoWithTheFlagsToType) {
  const Result r = run_cli("run --mode tp --degree 2 --load " + kFixture + "s14_b1_h12_a6_f32");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_THAT(r.output, StartsWith("shardscope: --load "));
  EXPECT_THAT(r.output, HasSubstr("run with --seq 14 --batch 1 --hidden 12 --heads 6\n"));
  EXPECT_THAT(r.output, Not(HasSubstr("rank")));
}

TEST(CliErrors, ALossThatBecomesNaNExitsOneNamingTheStepAndTheFlagThatFindsTheOp) {
  const std::string run = "run --seq 8 --batch 2 --hidden 16 --heads 2 --steps 3 --lr 1e30";
  Result r = run_cli(run);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("step 1: the loss is not finite"));
  EXPECT_THAT(r.output, HasSubstr("rerun with --check-finite to find the op"));
  r = run_cli(run + " --check-finite");  // the guard names the op; no advice to add the flag
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("op 'matmul' in attn.qkv"));
  EXPECT_THAT(r.output, Not(HasSubstr("rerun with")));
}

const std::string kSmall = " --seq 8 --batch 2 --hidden 16 --heads 2 --steps 1";

// Exit 2 and a single line holding `text`.
void expect_one_line_error(const std::string& args, const std::string& text) {
  const Result r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << args << "\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr(text)) << args;
}

TEST(CliErrors, ANegativeSeedIsRefusedInsteadOfWrappingAround) {
  expect_one_line_error("run --seed -1", "--seed: must be an integer >= 0, given -1");
  EXPECT_EQ(run_cli("run --seed 0" + kSmall).exit_code, 0);
}

TEST(CliErrors, LabZeroAndAFilterThatMatchesNoTestAreErrors) {
  expect_one_line_error("lab 0", "lab numbers start at 1, given 0");
  const Result r = run_cli("lab 1 --filter 'NoSuchTest*'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("shardscope: --filter NoSuchTest* matches no test of lab 1"));
  EXPECT_THAT(r.output, Not(HasSubstr("every test passes")));
}

TEST(CliErrors, AMisspeltFlagGetsTheNearestRealOne) {
  expect_one_line_error("run --degre 2", "(did you mean --degree?)");
  expect_one_line_error("run --check-finte", "(did you mean --check-finite?)");
  expect_one_line_error("check a b --shard", "(did you mean --shards?)");
  expect_one_line_error("lab 1 --filer X", "(did you mean --filter?)");
  const Result r = run_cli("run --zzzzzzzz");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, Not(HasSubstr("did you mean")));
}

TEST(CliErrors, AParallelModeAtDegreeOneSaysItIsTheSingleLayer) {
  const Result r = run_cli("run --mode tp" + kSmall);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("shardscope: note: --mode tp at --degree 1 is the "
                                  "single-device layer"));
  EXPECT_THAT(run_cli("run" + kSmall).output, Not(HasSubstr("note:")));
}

TEST(CliErrors, CommMpiOutsideMpirunSaysHowToLaunchIt) {
  const Result r = run_cli("run --comm mpi --mode tp --degree 2" + kSmall);
  if (r.output.find("this build has no MPI") != std::string::npos) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--comm mpi runs a process per rank, started by mpirun: "
                                  "mpirun -np 2 "));
  EXPECT_THAT(r.output, HasSubstr(" run --comm mpi --mode tp --degree 2 --seq 8"));
}

TEST(CliErrors, ARunThatCannotFitInMemoryIsRefusedBeforeItStarts) {
  // The saved attention scores alone: 32 heads x 65536^2 x 2 x 9 bytes, over 2 TiB.
  expect_one_line_error("run --seq 65536 --hidden 256 --heads 32 --steps 1",
                        "shardscope: the run needs at least ");
}

}  // namespace
