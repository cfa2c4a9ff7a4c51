// The command line's first half, parse_command: a Command with the chosen subcommand's flags
// resolved, or the exit code with nothing run (0 after --help, 2 with one line naming the flag).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "apps/cli.h"
#include "apps/run_flags.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Parsed {
  std::variant<Command, int> result;
  std::string out, err;
};

Parsed parse(std::vector<const char*> args) {
  args.insert(args.begin(), "shardscope");
  std::ostringstream out, err;
  Parsed p{parse_command(static_cast<int>(args.size()), args.data(), out, err), "", ""};
  p.out = out.str();
  p.err = err.str();
  return p;
}

TEST(ParseCommand, RunFlagsAreResolvedIntoTheRunOptions) {
  const Parsed p = parse(
      {"run", "--mode", "tp-sp", "--degree", "4", "--seq", "16", "--dtype", "f64", "--steps", "3"});
  ASSERT_TRUE(std::holds_alternative<Command>(p.result)) << p.err;
  const Command& c = std::get<Command>(p.result);
  EXPECT_EQ(c.name, Command::Name::run);
  EXPECT_EQ(c.run.spec.layer.mode, ParallelMode::tp_sp);
  EXPECT_EQ(c.run.spec.layer.degree, 4);
  EXPECT_EQ(c.run.spec.layer.seq, 16);
  EXPECT_EQ(c.run.spec.layer.dtype, DType::f64);
  EXPECT_EQ(c.run.spec.steps, 3);
  EXPECT_TRUE(p.err.empty());
}

TEST(ParseCommand, DebugTakesTheRunFlags) {
  const Parsed p = parse({"debug", "--mode", "ulysses", "--degree", "2"});
  ASSERT_TRUE(std::holds_alternative<Command>(p.result)) << p.err;
  EXPECT_EQ(std::get<Command>(p.result).name, Command::Name::debug);
  EXPECT_EQ(std::get<Command>(p.result).run.spec.layer.mode, ParallelMode::ulysses);
}

TEST(ParseCommand, MlpLnFlagsAreCheckedAndResolved) {
  const Parsed p = parse({"mlp-ln", "--degree", "4", "--norm", "local", "--dtype", "f64"});
  ASSERT_TRUE(std::holds_alternative<Command>(p.result)) << p.err;
  const Command& c = std::get<Command>(p.result);
  EXPECT_EQ(c.name, Command::Name::mlp_ln);
  EXPECT_EQ(c.mlp_ln.config.degree, 4);
  EXPECT_EQ(c.mlp_ln.config.dtype, DType::f64);
  EXPECT_EQ(c.mlp_ln.norms, std::vector<ShardedNorm>{ShardedNorm::local});
  EXPECT_EQ(c.mlp_ln.comm, CommKind::threads);
}

TEST(ParseCommand, HelpIsExitZeroWithTheHelpOnOut) {
  const Parsed p = parse({"run", "--help"});
  ASSERT_TRUE(std::holds_alternative<int>(p.result));
  EXPECT_EQ(std::get<int>(p.result), 0);
  EXPECT_THAT(p.out, HasSubstr("--degree"));
  EXPECT_TRUE(p.err.empty()) << p.err;
}

TEST(ParseCommand, BadFlagsAndValuesAreExitTwoWithOneLineNamingThem) {
  struct Case {
    std::vector<const char*> args;
    const char* named;
  };
  const std::vector<Case> cases = {
      {{"run", "--no-such-flag"}, "--no-such-flag"},
      {{"run", "--mode", "tp", "--degree", "3"},
       "heads 4 must be divisible by degree 3 (set by --heads and --degree)"},
      {{"mlp-ln", "--norm", "bogus"}, "--norm bogus"},
      {{"mlp-ln", "--dtype", "f8"}, "--dtype f8"},
      {{"mlp-ln", "--dtype", "f16"}, "the block runs in f32 or f64 (set by --dtype)"},
      {{"mlp-ln", "--degree", "3", "--ffn", "64"}, "--ffn"},
      {{}, "subcommand"},
  };
  for (const Case& c : cases) {
    const Parsed p = parse(c.args);
    ASSERT_TRUE(std::holds_alternative<int>(p.result)) << c.named;
    EXPECT_EQ(std::get<int>(p.result), 2) << c.named;
    EXPECT_THAT(p.err, StartsWith("shardscope: ")) << c.named;
    EXPECT_THAT(p.err, HasSubstr(c.named));
    EXPECT_EQ(p.err.find('\n'), p.err.size() - 1) << p.err;
    EXPECT_TRUE(p.out.empty()) << p.out;
  }
}

// --backend cuda without --comm: NCCL where every rank can have a device of its own (or under
// mpirun, a process per device), else threads sharing the devices.
TEST(DefaultCudaComm, NcclWithADevicePerRankElseThreadsSharingThem) {
  EXPECT_EQ(default_cuda_comm(1, 1, true, false), CommKind::nccl);
  EXPECT_EQ(default_cuda_comm(4, 4, true, false), CommKind::nccl);
  EXPECT_EQ(default_cuda_comm(4, 8, true, false), CommKind::nccl);
  EXPECT_EQ(default_cuda_comm(4, 1, true, false), CommKind::threads);
  EXPECT_EQ(default_cuda_comm(2, 0, true, false), CommKind::threads);
  EXPECT_EQ(default_cuda_comm(2, 2, false, false), CommKind::threads);  // a build without NCCL
  EXPECT_EQ(default_cuda_comm(4, 0, true, true), CommKind::nccl);
}

}  // namespace
}  // namespace shardscope
