// End-to-end: the files of `shardscope run` (--trace, --report, --dump). A bad path is refused
// before any rank starts, a write is whole or absent, a write that fails after the run still
// leaves the tables on stdout, a trace that drops events says so, and --log-every thins the step
// table. Failing writes come from a file size limit (ulimit -f, SIGXFSZ ignored: EFBIG).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/apps/cli_testing.h"
#include "tests/temp_path.h"

namespace {

namespace fs = std::filesystem;
using shardscope::testing::count_lines;
using shardscope::testing::Result;
using shardscope::testing::run_cli;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kTiny = "run --seq 8 --batch 1 --hidden 16 --heads 2 ";

using shardscope::testing_files::ScratchPath;

int entries(const fs::path& dir) {
  return static_cast<int>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

// The executable run by sh with files limited to `blocks` blocks: a larger write fails (EFBIG).
Result run_cli_with_file_limit(int blocks, const std::string& args) {
  return shardscope::testing::run_shell("trap '' XFSZ; ulimit -f " + std::to_string(blocks) +
                                        "; exec " + SHARDSCOPE_EXE + " " + args);
}

// How many rows the step table printed: lines "   4    2.001234      5.678", indented, of a step
// number and two numbers and nothing else. (No std::regex: GCC 12's <regex> trips
// -Wmaybe-uninitialized under the sanitizer build.)
int step_rows(const std::string& output) {
  std::istringstream lines(output);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    int step = 0;
    double loss = 0, ms = 0;
    char extra = 0;
    if (!line.empty() && line[0] == ' ' &&
        std::sscanf(line.c_str(), "%d %lf %lf %c", &step, &loss, &ms, &extra) == 3) {
      ++rows;
    }
  }
  return rows;
}

TEST(CliOutputs, ABadOutputPathIsRefusedBeforeTheRunWithOneLine) {
  const ScratchPath dir("outputs_paths", ScratchPath::folder);
  const Result missing = run_cli(kTiny + "--trace " + (dir / "missing" / "t.json").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_EQ(count_lines(missing.output), 1) << missing.output;
  EXPECT_THAT(missing.output,
              HasSubstr("--trace " + (dir / "missing" / "t.json").string() + ": the folder " +
                        (dir / "missing").string() + " does not exist"));
  const Result folder = run_cli(kTiny + "--trace " + dir.string());
  EXPECT_EQ(folder.exit_code, 2) << folder.output;
  EXPECT_THAT(folder.output, HasSubstr("--trace " + dir.string() + ": is a folder"));
  const Result report = run_cli(kTiny + "--report " + dir.string() + "/");
  EXPECT_EQ(report.exit_code, 2) << report.output;
  EXPECT_THAT(report.output, HasSubstr("--report " + dir.string() + "/: is a folder"));
  std::ofstream(dir / "file") << "not a folder";
  const Result dump = run_cli(kTiny + "--dump " + (dir / "file" / "d").string());
  EXPECT_EQ(dump.exit_code, 2) << dump.output;
  EXPECT_THAT(dump.output, HasSubstr("--dump " + (dir / "file" / "d").string() + ": " +
                                     (dir / "file").string() + " is not a folder"));
  for (const Result* r : {&missing, &folder, &report, &dump}) {
    EXPECT_THAT(r->output, Not(HasSubstr("step        loss")));  // no rank ran
  }
  EXPECT_EQ(entries(dir), 1) << "nothing is left beside the paths (no .tmp)";
  const Result debug = run_cli("debug --trace " + (dir / "t.json").string() + " </dev/null");
  EXPECT_EQ(debug.exit_code, 2) << debug.output;
  EXPECT_THAT(debug.output, HasSubstr("--trace is a flag of shardscope run"));
  const Result log = run_cli("debug --log-every 5 </dev/null");
  EXPECT_EQ(log.exit_code, 2) << log.output;
  EXPECT_THAT(log.output, HasSubstr("--log-every is a flag of shardscope run"));
}

TEST(CliOutputs, ADumpIsReplacedOnlyWithOverwrite) {
  const ScratchPath dir("outputs_overwrite", ScratchPath::folder);
  const std::string dump = (dir / "d").string();
  ASSERT_EQ(run_cli(kTiny + "--steps 1 --seed 1 --dump " + dump).exit_code, 0);
  const auto seed = [&] {
    return nlohmann::json::parse(std::ifstream(dir / "d" / "manifest.json"))["config"]["seed"];
  };
  const Result again = run_cli(kTiny + "--steps 1 --seed 2 --dump " + dump);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_THAT(again.output, HasSubstr("--dump " + dump +
                                      ": already holds a dump; give "
                                      "--overwrite"));
  EXPECT_EQ(seed(), 1) << "the dump is left as it was";
  const Result replaced = run_cli(kTiny + "--steps 1 --seed 2 --overwrite --dump " + dump);
  EXPECT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_EQ(seed(), 2);
  EXPECT_EQ(entries(dir), 1) << "no staging or old folder is left";
  fs::create_directories(dir / "other");
  std::ofstream(dir / "other" / "notes.txt") << "mine";
  const Result other = run_cli(kTiny + "--steps 1 --overwrite --dump " + (dir / "other").string());
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_THAT(other.output, HasSubstr("holds files but no dump"));
  EXPECT_TRUE(fs::exists(dir / "other" / "notes.txt"));
}

TEST(CliOutputs, ADumpThatFailsPartWayLeavesNothing) {
  const ScratchPath dir("outputs_partial", ScratchPath::folder);
  const std::string dump = (dir / "d").string();
  // 4 blocks: the input and the biases fit, the weight matrices do not.
  const Result r = run_cli_with_file_limit(4, kTiny + "--steps 1 --dump " + dump);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dump + "/"));
  EXPECT_THAT(r.output, HasSubstr("File too large"));
  EXPECT_THAT(r.output, Not(HasSubstr(".tmp")));
  EXPECT_EQ(entries(dir), 0) << "no dump, no staging folder, no .npy file";
}

TEST(CliOutputs, TheTablesArePrintedWhenATraceCannotBeWrittenAfterTheRun) {
  const ScratchPath dir("outputs_late", ScratchPath::folder);
  const std::string trace = (dir / "t.json").string(), report = (dir / "r.json").string();
  // 20 blocks: the report fits, the trace does not.
  const Result r =
      run_cli_with_file_limit(20, kTiny + "--steps 2 --trace " + trace + " --report " + report);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("step        loss"));
  EXPECT_THAT(r.output, HasSubstr("peak live bytes"));
  EXPECT_THAT(r.output, HasSubstr("error: --trace " + trace + ": writing failed (File too large)"));
  EXPECT_THAT(r.output, HasSubstr("report written to " + report));
  EXPECT_EQ(entries(dir), 1) << "the report only: no trace, no temporary";
  EXPECT_TRUE(fs::exists(report));
  // 1 block: neither fits; each is named, and the tables are still there.
  fs::remove(report);
  const Result both =
      run_cli_with_file_limit(1, kTiny + "--steps 2 --trace " + trace + " --report " + report);
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_THAT(both.output, HasSubstr("peak live bytes"));
  EXPECT_THAT(both.output, HasSubstr("error: --trace " + trace + ": writing failed"));
  EXPECT_THAT(both.output,
              HasSubstr("error: --report " + report + ": writing failed (File too large)"));
  EXPECT_EQ(entries(dir), 0);
}

TEST(CliOutputs, DroppedTraceEventsAreNamedOnStderrAndInTheFile) {
  const ScratchPath dir("outputs_dropped", ScratchPath::folder);
  const std::string trace = (dir / "t.json").string();
  const Result r = run_cli(kTiny + "--steps 3 --trace-events 400 --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(trace))["otherData"];
  const auto dropped = meta["dropped_events"].get<std::uint64_t>();
  const auto first = meta["first_dropped_step"].get<std::int64_t>();
  ASSERT_GT(dropped, 0u);
  EXPECT_GE(first, 0);
  EXPECT_LT(first, 3);
  EXPECT_THAT(r.output, HasSubstr("warning: --trace " + trace +
                                  ": the trace keeps its first 400 "
                                  "events and dropped " +
                                  std::to_string(dropped) + " later ones, from step " +
                                  std::to_string(first) + " on"));
  for (const auto& e : nlohmann::json::parse(std::ifstream(trace))["traceEvents"]) {
    if (e.contains("args") && e["args"].contains("step")) {
      EXPECT_LE(e["args"]["step"].get<std::int64_t>(), first) << e.dump();
    }
  }
  const Result whole = run_cli(kTiny + "--steps 1 --trace " + trace);
  EXPECT_THAT(whole.output, Not(HasSubstr("dropped")));
}

TEST(CliOutputs, LogEveryThinsTheStepTableOfALongRun) {
  const Result short_run = run_cli(kTiny + "--steps 5");
  ASSERT_EQ(short_run.exit_code, 0) << short_run.output;
  EXPECT_EQ(step_rows(short_run.output), 5);
  const Result long_run = run_cli(kTiny + "--steps 60");  // every 3 steps, and step 59
  ASSERT_EQ(long_run.exit_code, 0) << long_run.output;
  EXPECT_EQ(step_rows(long_run.output), 21) << long_run.output;
  EXPECT_THAT(long_run.output, HasSubstr("\n  59 "));
  EXPECT_THAT(long_run.output, HasSubstr("(every 3 steps, and the last; --log-every)"));
  const Result every = run_cli(kTiny + "--steps 60 --log-every 1");
  EXPECT_EQ(step_rows(every.output), 60);
  const Result ten = run_cli(kTiny + "--steps 60 --log-every 25");  // 0, 25, 50, 59
  EXPECT_EQ(step_rows(ten.output), 4);
  EXPECT_EQ(run_cli(kTiny + "--log-every -1").exit_code, 2);
}

}  // namespace
