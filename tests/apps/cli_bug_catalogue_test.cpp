// The bug catalogue end to end: `shardscope run --plant-bug NAME` exits 3 naming the catalogued
// tensors as failed, and `shardscope check` of its dump against a clean single-device dump exits
// 3 too. The names and modes come from the catalogue's table (parallel/layers/planted_bug.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>

#include "parallel/layers/layer_config.h"
#include "parallel/layers/planted_bug.h"
#include "tests/apps/cli_testing.h"
#include "tests/temp_path.h"

namespace shardscope {
namespace {

using testing::Result;
using testing::run_cli;

const char* const kShape = " --seq 8 --batch 1 --hidden 16 --heads 4 --steps 1 --dtype f64";

// The layer the bug needs: dropout on or off, the rotary embedding.
std::string layer_flags(const PlantedBugInfo& info) {
  return std::string(info.needs_dropout ? " --dropout 0.1" : " --dropout 0") +
         (info.needs_rope ? " --rope" : "");
}

// Whether a line of `output` names `tensor` as failed (the check's table: name ... FAIL).
bool names_failed(const std::string& output, const std::string& tensor) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(tensor + " ", 0) == 0 && line.find("FAIL") != std::string::npos) return true;
  }
  return false;
}

std::string case_name(const ::testing::TestParamInfo<std::size_t>& info) {
  std::string name = planted_bugs()[info.param].name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CliPlantedBug : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CliPlantedBug, RunExits3NamingTheDivergingTensorsAndCheckOfItsDumpFails) {
  const PlantedBugInfo& info = planted_bugs()[GetParam()];
  const shardscope::testing_files::ScratchPath dir("bug_" + std::string(info.name));
  const std::string flags = kShape + layer_flags(info);
  const auto single = dir / "single", planted = dir / "planted";
  ASSERT_EQ(run_cli("run --mode single" + flags + " --dump " + single.string()).exit_code, 0);
  const Result r =
      run_cli(std::string("run --mode ") + mode_name(first_mode(info.bug)) + " --degree 2" + flags +
              " --plant-bug " + info.name + " --dump " + planted.string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  for (const std::string& tensor : diverging_tensors(info.bug)) {
    EXPECT_TRUE(names_failed(r.output, tensor)) << tensor << " not named as failed:\n" << r.output;
  }
  const Result c = run_cli("check " + planted.string() + " " + single.string());
  EXPECT_EQ(c.exit_code, 3) << c.output;
  EXPECT_THAT(c.output, ::testing::HasSubstr("FAIL"));
}

INSTANTIATE_TEST_SUITE_P(Catalogue, CliPlantedBug,
                         ::testing::Range<std::size_t>(0, planted_bugs().size()), case_name);

TEST(CliPlantedBug, AnUnknownNameOrAWrongModeIsExit2NamingTheCatalogue) {
  Result r = run_cli(std::string("run --mode tp --degree 2") + kShape + " --plant-bug f-and-g");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("--plant-bug"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("sp-layernorm-grad-not-reduced"));
  r = run_cli(std::string("run --mode tp --degree 2") + kShape +
              " --plant-bug sp-layernorm-grad-not-reduced");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, ::testing::HasSubstr("tp-sp"));
}

}  // namespace
}  // namespace shardscope
