// End-to-end: shardscope's single and parallel runs against the PyTorch reference dumps of
// tests/fixtures/torch/ (made by make_fixture.py there, docs/dump-format.md): each run starts from
// a fixture's weights and data (--load) and `shardscope check` compares its dump with the
// fixture under the check's default tolerances. A perturbed copy of a fixture must fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "io/npy.h"
#include "tests/apps/cli_testing.h"
#include "tests/temp_path.h"

namespace {

namespace fs = std::filesystem;
using shardscope::testing::Result;
using shardscope::testing::run_cli;
using ::testing::HasSubstr;
using ::testing::Not;

const fs::path kFixtures = SHARDSCOPE_TORCH_FIXTURES;
constexpr const char* kAllPassed = "29 of 29 tensors passed";

// The fixture folders (those holding a manifest.json), sorted by name.
std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    if (fs::exists(entry.path() / "manifest.json")) names.push_back(entry.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// "--seq 6 --batch 2 --hidden 16 --heads 4 --dtype f64" from a fixture's manifest config.
std::string shape_flags(const fs::path& fixture) {
  std::ifstream in(fixture / "manifest.json");
  const nlohmann::json config = nlohmann::json::parse(in).at("config");
  std::ostringstream flags;
  flags << " --seq " << config.at("seq") << " --batch " << config.at("batch") << " --hidden "
        << config.at("hidden") << " --heads " << config.at("heads") << " --dtype "
        << config.at("dtype").get<std::string>();
  return flags.str();
}

// Runs one step of `mode` from the fixture's weights and data and dumps it into `out`.
Result run_from(const fs::path& fixture, const std::string& mode, const fs::path& out) {
  const std::string degree = mode == "single" ? "1" : "2";
  return run_cli("run --mode " + mode + " --degree " + degree + shape_flags(fixture) +
                 " --dropout 0 --steps 1 --load " + fixture.string() + " --dump " + out.string());
}

// Multiplies every element of a .npy file (f32 or f64) by `factor`, in place.
void scale_npy(const fs::path& file, double factor) {
  const shardscope::NpyHeader header = shardscope::read_npy_header(file);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto scale = [&](auto* values) {
    using T = std::remove_reference_t<decltype(*values)>;
    const std::size_t n = (data.size() - header.data_offset) / sizeof(T);
    for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<T>(values[i] * factor);
  };
  char* begin = data.data() + header.data_offset;
  if (header.dtype == shardscope::DType::f64) {
    scale(reinterpret_cast<double*>(begin));
  } else {
    ASSERT_EQ(header.dtype, shardscope::DType::f32) << file;
    scale(reinterpret_cast<float*>(begin));
  }
  f.seekp(0);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// The line of the check's table that starts with `tensor` and a space, or "".
std::string table_row(const std::string& output, const std::string& tensor) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(tensor + " ", 0) == 0) return line;
  }
  return "";
}

class TorchFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchFixture, SingleAndEveryParallelModeMatchPyTorchUnderTheDefaultTolerances) {
  const fs::path fixture = kFixtures / GetParam();
  const shardscope::testing_files::ScratchPath dir("torch_fixture_" + GetParam());
  for (const std::string mode : {"single", "tp", "tp-sp", "ulysses"}) {
    const fs::path out = dir / mode;
    const Result run = run_from(fixture, mode, out);
    ASSERT_EQ(run.exit_code, 0) << mode << ":\n" << run.output;
    const Result check = run_cli("check " + out.string() + " " + fixture.string());
    EXPECT_EQ(check.exit_code, 0) << mode << ":\n" << check.output;
    EXPECT_THAT(check.output, HasSubstr(kAllPassed)) << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(Dumps, TorchFixture, ::testing::ValuesIn(fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;  // s6_b2_h16_a4_f64: letters, digits and '_'
                         });

TEST(TorchFixtures, ThreeShapesEachInF64AndF32) {
  const std::vector<std::string> names = fixture_names();
  EXPECT_EQ(names.size(), 6u);
  for (const std::string& name : names) {
    const std::string base = name.substr(0, name.size() - 4);  // without "_f64" / "_f32"
    EXPECT_EQ(std::count(names.begin(), names.end(), base + "_f64"), 1) << name;
    EXPECT_EQ(std::count(names.begin(), names.end(), base + "_f32"), 1) << name;
  }
}

TEST(TorchFixtures, ACheckAgainstAPerturbedFixtureFailsAndNamesTheTensor) {
  const fs::path fixture = kFixtures / "s14_b1_h12_a6_f32";
  const shardscope::testing_files::ScratchPath dir("torch_fixture_perturbed");
  const fs::path out = dir / "single", perturbed = dir / "perturbed";
  fs::create_directories(dir);
  fs::copy(fixture, perturbed);
  scale_npy(perturbed / "attn.proj.weight.grad.npy", 1.01);
  const Result run = run_from(fixture, "single", out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  Result check = run_cli("check " + out.string() + " " + fixture.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
  check = run_cli("check " + out.string() + " " + perturbed.string());
  EXPECT_EQ(check.exit_code, 3) << check.output;
  EXPECT_THAT(table_row(check.output, "attn.proj.weight.grad"), HasSubstr("FAIL")) << check.output;
  EXPECT_THAT(table_row(check.output, "attn.proj.weight"), Not(HasSubstr("FAIL")));
  EXPECT_THAT(check.output, HasSubstr("28 of 29 tensors passed"));
}

}  // namespace
