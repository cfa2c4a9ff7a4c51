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

}  // namespace
