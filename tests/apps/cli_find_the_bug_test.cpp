// Lab 8 end to end: `shardscope run --plant-bug random` plants choose_random_bug(seed, config)
// (its dump equals that of the same run with the bug named) and names no bug of the catalogue in
// anything it prints or writes (output, report, trace, dump); `shardscope lab 8 --answers FILE`
// grades a right answer right and a wrong one wrong with a hint that does not name the answer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "parallel/layers/layer_config.h"
#include "parallel/layers/planted_bug.h"
#include "tests/apps/cli_testing.h"
#include "tests/temp_path.h"

namespace shardscope {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Result;
using testing::run_cli;

const char* const kShape =
    " --degree 2 --seq 8 --batch 1 --hidden 16 --heads 4 --steps 1 --dtype f64 --dropout 0.1";

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The names of the catalogue found in `text`.
std::string bug_names_in(const std::string& text) {
  std::string found;
  for (const PlantedBugInfo& info : planted_bugs()) {
    if (text.find(info.name) != std::string::npos) found += std::string(" ") + info.name;
  }
  return found;
}

LayerConfig config_of(ParallelMode mode, std::uint64_t seed) {
  LayerConfig c;
  c.mode = mode;
  c.seed = seed;
  c.dropout = 0.1;
  return c;
}

struct RandomRun {
  ParallelMode mode;
  std::uint64_t seed;
};

class CliRandomBug : public ::testing::TestWithParam<RandomRun> {};

TEST_P(CliRandomBug, PlantsTheChosenBugAndNamesNoBugInAnythingItWrites) {
  const RandomRun p = GetParam();
  const std::string name = planted_bug_name(choose_random_bug(p.seed, config_of(p.mode, p.seed)));
  const shardscope::testing_files::ScratchPath dir(
      "random_bug_" + std::string(mode_name(p.mode)) + "_" + std::to_string(p.seed),
      shardscope::testing_files::ScratchPath::folder);
  const std::string flags =
      std::string("--mode ") + mode_name(p.mode) + kShape + " --seed " + std::to_string(p.seed);
  const Result r = run_cli(
      "run " + flags + " --plant-bug random --dump " + (dir / "random").string() + " --report " +
      (dir / "report.json").string() + " --trace " + (dir / "trace.json").string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(bug_names_in(r.output), "") << r.output;
  EXPECT_EQ(bug_names_in(read_all(dir / "report.json")), "");
  EXPECT_EQ(bug_names_in(read_all(dir / "trace.json")), "");
  int dump_files = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir / "random")) {
    if (!e.is_regular_file()) continue;
    ++dump_files;
    EXPECT_EQ(bug_names_in(e.path().string() + read_all(e.path())), "") << e.path();
  }
  EXPECT_GT(dump_files, 1);
  EXPECT_THAT(read_all(dir / "random" / "manifest.json"), HasSubstr("\"seed\""));
  // The same run with the chosen bug named writes the same tensors.
  ASSERT_EQ(run_cli("run " + flags + " --plant-bug " + name + " --dump " + (dir / "named").string())
                .exit_code,
            3);
  const Result same = run_cli("check " + (dir / "random").string() + " " +
                              (dir / "named").string() + " --rtol 0 --atol 0");
  EXPECT_EQ(same.exit_code, 0) << name << "\n" << same.output;
}

INSTANTIATE_TEST_SUITE_P(Lab8Runs, CliRandomBug,
                         ::testing::Values(RandomRun{ParallelMode::tp_sp, 7},
                                           RandomRun{ParallelMode::tp, 3},
                                           RandomRun{ParallelMode::ulysses, 5}),
                         [](const ::testing::TestParamInfo<RandomRun>& run) {
                           std::string name = mode_name(run.param.mode);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + "_seed" + std::to_string(run.param.seed);
                         });

TEST(CliRandomBug, ModeSingleIsExit2NamingTheMode) {
  const Result r = run_cli("run --mode single --plant-bug random --seq 8 --hidden 16");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--plant-bug"));
  EXPECT_THAT(r.output, HasSubstr("mode single"));
}

// The line of `output` that starts "  line N:".
std::string graded_line(const std::string& output, int n) {
  std::istringstream lines(output);
  const std::string prefix = "  line " + std::to_string(n) + ": ";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "(no line " + std::to_string(n) + ")";
}

Result grade(const std::string& answers, const fs::path& file) {
  std::ofstream(file) << answers;
  return run_cli("lab 8 --answers " + file.string());
}

TEST(CliLab8, GradesARightAnswerRightAndAWrongOneWrongWithAHintThatHidesTheAnswer) {
  const shardscope::testing_files::ScratchPath file("lab8_answers.txt");
  const PlantedBug planted = choose_random_bug(7, config_of(ParallelMode::tp_sp, 7));
  const std::string right = planted_bug_name(planted);
  std::string wrong, other_mode;  // plantable in tp-sp but not it; a mistake of tp only
  for (PlantedBug bug : plantable_bugs(config_of(ParallelMode::tp_sp, 7))) {
    if (bug != planted && wrong.empty()) wrong = planted_bug_name(bug);
  }
  for (const PlantedBugInfo& info : planted_bugs()) {
    if (!planted_bug_applies(info.bug, ParallelMode::tp_sp)) other_mode = info.name;
  }
  const Result r = grade("# a comment\ntp-sp 7 " + right + "\ntp-sp 7 " + wrong + "\ntp-sp 7 " +
                             other_mode + "\ntp-sp 7 ?\n",
                         file);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(graded_line(r.output, 2), HasSubstr(right + " is right"));
  const std::string hint = graded_line(r.output, 3);
  EXPECT_THAT(hint, HasSubstr(wrong + " is wrong: " + wrong + " would make"));
  EXPECT_THAT(hint, HasSubstr("this run's bug"));
  EXPECT_THAT(hint, Not(HasSubstr(right)));
  EXPECT_THAT(graded_line(r.output, 4), HasSubstr("cannot be this run's bug"));
  EXPECT_THAT(graded_line(r.output, 4), Not(HasSubstr(right)));
  EXPECT_THAT(graded_line(r.output, 5), HasSubstr("not answered yet"));
  EXPECT_THAT(r.output, HasSubstr("lab 8 (answers): 1 of 4 answers right; next: look again at the "
                                  "bug of `shardscope run --mode tp-sp --degree 2 --seed 7 "
                                  "--plant-bug random`"));

  const Result all = grade("tp-sp 7 " + right + "\n", file);
  EXPECT_EQ(all.exit_code, 0) << all.output;
  EXPECT_THAT(all.output, HasSubstr("lab 8 (answers): every answer is right (1 of 1)"));

  const Result unknown = grade("tp-sp 7 f-and-g\n", file);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("line 1: 'f-and-g' is not a bug of the catalogue"));
  for (const PlantedBugInfo& info : planted_bugs()) {
    EXPECT_THAT(unknown.output, HasSubstr(info.name)) << "the names are listed";
  }
}

}  // namespace
}  // namespace shardscope
