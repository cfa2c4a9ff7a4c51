// End-to-end: the shardscope executable's output, exit codes and JSON report.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/apps/cli_testing.h"
#include "tests/temp_path.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using shardscope::testing::count_lines;
using shardscope::testing::Result;
using shardscope::testing::run_cli;

TEST(Cli, RunPrintsLossesAndAMatchingMemoryTable) {
  const Result r = run_cli("run --mode single --seq 16 --batch 2 --hidden 32 --heads 4 --steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("step        loss"));
  EXPECT_THAT(r.output, HasSubstr("sbh(16A + 2M) + as^2b(2A + M)"));
  EXPECT_THAT(r.output, HasSubstr("match"));
  EXPECT_THAT(r.output, Not(HasSubstr("MISMATCH")));
  EXPECT_THAT(r.output, Not(HasSubstr("differs")));
  // s=16 b=2 h=32 a=4, f32: sbh (16*4 + 2) + as^2b (2*4 + 1) = 1024*66 + 2048*9
  EXPECT_THAT(r.output, HasSubstr(std::to_string(1024 * 66 + 2048 * 9)));
}

// Llama's norm, MLP and no biases from the command line: the header names them, the check passes,
// the memory table matches its formula (SwiGLU's f = 96 = 1.5h in its own size, sbf).
// A stack of layers: every layer's tensors checked, each layer's memory and collectives beside the
// layer's models, the total beside L times the formula, in the table and the report.
TEST(Cli, AStackOfLayersIsCheckedAndMeasuredLayerByLayer) {
  const shardscope::testing_files::ScratchPath path("e2e_stack.json");
  const Result r = run_cli(
      "run --model llama --kv-heads 2 --layers 3 --mode tp-sp --degree 2 --seq 8 --batch 2 "
      "--hidden 32 --heads 4 --steps 2 --report " +
      path.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("s=8 b=2 h=32 a=4 g=2 f=96 L=3, rmsnorm"));
  EXPECT_THAT(r.output, HasSubstr("layers.2.mlp.fc2.weight.grad"));
  EXPECT_THAT(r.output, HasSubstr("check passed"));
  EXPECT_THAT(r.output, HasSubstr("layer 2 all_gather"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("layer 2 +\\(sbh"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("total, 3 layers +3 x \\(sbh"));
  EXPECT_THAT(r.output, Not(HasSubstr("MISMATCH")));
  EXPECT_THAT(r.output, Not(HasSubstr("DIFFERS")));
  std::ifstream file(path);
  ASSERT_TRUE(file) << "no report at " << path;
  const nlohmann::json report = nlohmann::json::parse(file);
  EXPECT_EQ(report["config"]["layers"], 3);
  const nlohmann::json& rank0 = report["memory"]["per_rank"][0];
  ASSERT_EQ(rank0["layers"].size(), 3u);
  EXPECT_EQ(rank0["layers"][2]["saved_activation_bytes"], rank0["layers"][2]["formula_bytes"]);
  EXPECT_EQ(rank0["saved_activation_bytes"].get<double>(),
            3 * rank0["layers"][0]["formula_bytes"].get<double>());
  EXPECT_EQ(rank0["terms"].back()["layer"], 2);
  EXPECT_TRUE(report["model_differences"].empty());
  const Result none = run_cli("run --layers 0");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_THAT(none.output, HasSubstr("layers must be in [1, 65536], given 0 (set by --layers)"));
}

// The 2-byte types: checked at their tolerance against the single-device layer in their own dtype
// and (step 0) in f32, in the tables and the report, the paper's numbers with A = 2, and the runs
// they cannot make refused before any rank starts.
TEST(Cli, TwoByteRunsAreCheckedAndRefusedWhereTheyCannotRun) {
  const shardscope::testing_files::ScratchPath path("e2e_bf16.json");
  const Result bf16 = run_cli(
      "run --dtype bf16 --mode tp-sp --degree 2 --seq 8 --batch 2 --hidden 32 --heads 4 --steps 2 "
      "--report " +
      path.string());
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_THAT(bf16.output, HasSubstr("(A = 2 bytes, bf16;"));
  EXPECT_THAT(bf16.output, HasSubstr("<= 0.03125 max|b| + 0.03125 |b|"));
  EXPECT_THAT(bf16.output, HasSubstr("step 0 against the single-device layer in f32"));
  EXPECT_THAT(bf16.output, ::testing::ContainsRegex("check passed(.|\n)*check passed"));
  EXPECT_THAT(bf16.output, Not(HasSubstr("MISMATCH")));
  std::ifstream file(path);
  ASSERT_TRUE(file) << "no report at " << path;
  const nlohmann::json report = nlohmann::json::parse(file);
  EXPECT_EQ(report["f32_check"]["ran"], true);
  EXPECT_EQ(report["f32_check"]["passed"], true);
  EXPECT_EQ(report["f32_check"]["step"], 0);
  EXPECT_EQ(report["f32_check"]["tensors"].size(), report["check"]["tensors"].size());
  const Result f16 = run_cli(
      "run --dtype f16 --mode tp --degree 2 --seq 8 --batch 2 --hidden 32 "
      "--heads 4 --steps 1");
  ASSERT_EQ(f16.exit_code, 0) << f16.output;
  EXPECT_THAT(f16.output, HasSubstr("check passed"));
  const std::pair<const char*, const char*> refused[] = {
      {"run --dtype bf16 --dump /tmp/shardscope_never", "NumPy has no bfloat16"},
      {"run --dtype f16 --backend cuda", "--dtype f16 runs on --backend cpu or reference"},
      {"run --dtype bf16 --comm mpi", "--dtype bf16 runs with --comm threads"}};
  for (const auto& [command, why] : refused) {
    const Result r = run_cli(command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(why)) << command;
  }
}

// Recomputation: the run says what it keeps, as the paper's formulas (Korthikanti et al. 2022).
TEST(Cli, RecomputationKeepsWhatThePaperSays) {
  const Result selective = run_cli(
      "run --mode tp-sp --degree 2 --recompute selective --seq 8 --batch 2 --hidden 32 --heads 4 "
      "--steps 2");
  ASSERT_EQ(selective.exit_code, 0) << selective.output;
  EXPECT_THAT(selective.output, HasSubstr("a=4, recompute selective"));
  EXPECT_THAT(selective.output, HasSubstr("attn.core/checkpoint"));
  EXPECT_THAT(selective.output,
              ::testing::ContainsRegex("total +sbh\\(16A \\+ 2M\\)/t +[0-9]+ +[0-9]+  match"));
  EXPECT_THAT(selective.output, HasSubstr("check passed"));
  const Result full = run_cli(
      "run --mode tp --degree 2 --recompute full --seq 8 --batch 2 --hidden 32 --heads 4 --steps "
      "1");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_THAT(full.output, ::testing::ContainsRegex("total +sbh\\(A\\) +[0-9]+ +[0-9]+  match"));
  EXPECT_THAT(full.output, Not(HasSubstr("DIFFERS")));
  const Result bad = run_cli("run --recompute partial");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("expected none, selective or full (set by --recompute)"));
}

TEST(Cli, TheLayersOptionsRunCheckedWithTheirFormula) {
  const Result r = run_cli(
      "run --mode tp-sp --degree 2 --norm rmsnorm --mlp swiglu --no-bias --ffn 96 --seq 8 "
      "--batch 2 --hidden 64 --heads 4 --steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("s=8 b=2 h=64 a=4 f=96, rmsnorm, swiglu, no biases"));
  EXPECT_THAT(r.output, HasSubstr("check passed"));
  EXPECT_THAT(r.output, HasSubstr("(sbh(8A + 2M) + sbf(3A) + as^2b(2A + M))/t"));
  EXPECT_THAT(r.output, HasSubstr("mlp.swiglu/swiglu"));
  EXPECT_THAT(r.output, Not(HasSubstr("MISMATCH")));
  // Llama's attention: grouped-query (g = 1 < t = 2: the key/value head replicated) and rotary.
  const Result gqa = run_cli(
      "run --mode tp --degree 2 --norm rmsnorm --mlp swiglu --no-bias --kv-heads 1 --rope "
      "--seq 8 --batch 2 --hidden 32 --heads 4 --steps 1");
  ASSERT_EQ(gqa.exit_code, 0) << gqa.output;
  EXPECT_THAT(gqa.output, HasSubstr("g=1, rmsnorm, swiglu, no biases, rope"));
  EXPECT_THAT(gqa.output, HasSubstr("check passed"));
  EXPECT_THAT(gqa.output, HasSubstr("sbgd(2A)/g"));
  // The llama preset (f = 8h/3 = 85.3 rounded up to 96), and flags that override it.
  const Result llama = run_cli(
      "run --model llama --mode ulysses --degree 4 --kv-heads 2 --seq 8 --batch 1 --hidden 32 "
      "--heads 4 --steps 1");
  ASSERT_EQ(llama.exit_code, 0) << llama.output;
  EXPECT_THAT(llama.output,
              HasSubstr("s=8 b=1 h=32 a=4 g=2 f=96, rmsnorm, swiglu, no biases, rope, dropout 0,"));
  EXPECT_THAT(llama.output, HasSubstr("check passed"));
  const Result mixed = run_cli(
      "run --model llama --norm layernorm --dropout 0.1 --ffn 64 --seq 8 --batch 1 --hidden 32 "
      "--heads 4 --steps 1");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  EXPECT_THAT(mixed.output, HasSubstr("a=4 f=64, swiglu, no biases, rope, dropout 0.1,"));
  const Result unknown = run_cli("run --model mistral");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("model \"mistral\" is not a model: expected gpt, llama "
                                        "(set by --model)"));
  const Result uneven = run_cli("run --mode tp --degree 2 --heads 6 --hidden 48 --kv-heads 3");
  EXPECT_EQ(uneven.exit_code, 2) << uneven.output;
  EXPECT_THAT(uneven.output,
              HasSubstr("mode tp: kv_heads 3 and degree 2: one must divide the other"));
  EXPECT_THAT(uneven.output, HasSubstr("(set by --kv-heads and --degree)"));
  const Result bad = run_cli("run --norm batchnorm");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("norm \"batchnorm\" is not a norm: expected layernorm or "
                                    "rmsnorm (set by --norm)"));
  const Result odd = run_cli("run --mode tp --degree 4 --ffn 30");
  EXPECT_EQ(odd.exit_code, 2) << odd.output;
  EXPECT_THAT(odd.output, HasSubstr("mode tp: ffn 30 must be divisible by degree 4 (fc1's columns "
                                    "and fc2's rows are split) (set by --ffn and --degree)"));
}

TEST(Cli, ReportHasTheStableKeys) {
  const shardscope::testing_files::ScratchPath path("e2e_report.json");
  const Result r = run_cli(
      "run --seq 8 --batch 2 --hidden 16 --heads 2 --steps 3 --dropout 0.2 "
      "--seed 5 --report " +
      path.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream file(path);
  ASSERT_TRUE(file) << "no report at " << path;
  const nlohmann::json j = nlohmann::json::parse(file);
  EXPECT_EQ(j["config"]["seq"], 8);
  EXPECT_EQ(j["config"]["mode"], "single");
  EXPECT_EQ(j["config"]["dropout"], 0.2);
  EXPECT_EQ(j["config"]["seed"], 5);
  ASSERT_EQ(j["steps"].size(), 3u);
  for (const auto& s : j["steps"]) {
    EXPECT_TRUE(s["loss"].is_number());
    EXPECT_GT(s["time_ms"].get<double>(), 0.0);
  }
  const auto& rank0 = j["memory"]["per_rank"].at(0);
  EXPECT_EQ(rank0["rank"], 0);
  EXPECT_EQ(rank0["saved_activation_bytes"], rank0["formula_bytes"]);
  // s=8 b=2 h=16 a=2: 256 * 66 + 256 * 9
  EXPECT_EQ(rank0["formula_bytes"].get<double>(), 256.0 * 66 + 256.0 * 9);
  EXPECT_EQ(rank0["extras_bytes"].get<double>(), 4.0 * 4 * 16);
  EXPECT_GT(rank0["peak_bytes"].get<double>(), rank0["saved_activation_bytes"].get<double>());
}

TEST(Cli, BadFlagsExitNonZeroWithOneLineNamingTheFlag) {
  struct Case {
    const char* args;
    const char* expected;
  };
  const Case cases[] = {
      // The library names the configuration's fields; the command line adds the flags.
      {"run --hidden 30 --heads 4",
       "hidden 30 must be divisible by heads 4 (each head gets hidden/heads features) (set by "
       "--hidden and --heads)"},
      {"run --seq 0", "seq must be a positive integer, given 0 (set by --seq)"},
      {"run --batch -3", "batch must be a positive integer, given -3 (set by --batch)"},
      {"run --dropout 1.5", "dropout must be in [0, 1), given 1.500000 (set by --dropout)"},
      {"run --mode diagonal",
       "mode \"diagonal\" is not a mode: expected single, tp, tp-sp or "
       "ulysses (set by --mode)"},
      {"run --dtype f8", "--dtype f8 is not supported: expected f32, f64, bf16 or f16"},
      {"run --steps 0", "--steps must be >= 1"},
      {"run --trace-events 0", "--trace-events must be in [1, 268435456], given 0"},
      {"run --trace-events 268435457", "--trace-events must be in [1, 268435456], given 268435457"},
      {"run --lr nan", "--lr must be a finite number > 0"},
      {"run --lr -1", "--lr must be a finite number > 0"},
      {"run --seq 4294967296 --batch 4294967296 --hidden 4 --heads 4", "more than the 1e12"},
      {"run --seq abc", "--seq"},
      {"run --mode tp --degree 3 --heads 4",
       "mode tp: heads 4 must be divisible by degree 3 (set by --heads and --degree)"},
      {"run --mode tp-sp --degree 4 --seq 10",
       "mode tp-sp: seq 10 must be divisible by degree 4 (each rank holds s/t positions) (set by "
       "--seq and --degree)"},
      {"run --mode ulysses --degree 8 --heads 4 --hidden 32",
       "mode ulysses: degree 8 is above heads 4 (Ulysses gives each rank whole heads) (set by "
       "--degree and --heads)"},
      {"run --mode single --degree 2",
       "mode single runs on one rank: degree must be 1, given 2 (set by --mode and --degree)"},
      {"run --comm carrier-pigeon",
       "comm \"carrier-pigeon\" is not a communicator: expected threads, mpi or nccl (set by "
       "--comm)"},
      {"run --mode tp --degree 2 --keep-gathered-input", "applies to --mode tp-sp only"},
      {"run --no-such-flag", "--no-such-flag"},
      {"", "subcommand"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_THAT(r.output, HasSubstr(c.expected)) << c.args;
    EXPECT_EQ(count_lines(r.output), 1) << c.args << "\n" << r.output;
  }
}

TEST(Cli, ParallelModesReportTheCheckTheCommunicationAndTheMemory) {
  const shardscope::testing_files::ScratchPath path("e2e_parallel.json");
  for (const char* mode : {"tp", "tp-sp", "ulysses"}) {
    std::filesystem::remove(path);
    const Result r = run_cli(std::string("run --mode ") + mode +
                             " --degree 4 --seq 8 --batch 2 --hidden 16 --heads 4 --steps 2 "
                             "--report " +
                             path.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("check passed")) << mode;
    EXPECT_THAT(r.output, HasSubstr("communication per rank")) << mode;
    EXPECT_THAT(r.output, Not(HasSubstr("DIFFERS"))) << mode;
    EXPECT_THAT(r.output, Not(HasSubstr("MISMATCH"))) << mode;
    std::ifstream file(path);
    const nlohmann::json j = nlohmann::json::parse(file);
    EXPECT_EQ(j["config"]["mode"], mode);
    EXPECT_TRUE(j["check"]["passed"].get<bool>());
    // output, loss, input.grad, 12 parameter gradients, 12 parameters after the update
    EXPECT_EQ(j["check"]["tensors"].size(), 27u);
    EXPECT_EQ(j["check"]["steps_checked"], 2);
    EXPECT_EQ(j["comm"]["total_bytes_per_rank"], j["comm"]["model_bytes_per_rank"]);
    EXPECT_GT(j["comm"]["total_bytes_per_rank"].get<double>(), 0.0);
    ASSERT_EQ(j["memory"]["per_rank"].size(), 4u);
    for (const auto& rank : j["memory"]["per_rank"]) {
      EXPECT_EQ(rank["saved_activation_bytes"], rank["formula_bytes"]) << mode;
    }
  }
}

// Flips the last element of a .npy file's data (f32), as a bug in another implementation would.
void perturb_last_f32(const std::filesystem::path& npy) {
  std::fstream f(npy, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-4, std::ios::end);
  float v = 0;
  f.read(reinterpret_cast<char*>(&v), 4);
  v += 0.5f + 2 * v;
  f.seekp(-4, std::ios::end);
  f.write(reinterpret_cast<const char*>(&v), 4);
}

TEST(Cli, DumpsOfTpAndSingleAgreeUnderCheckAndAPerturbedTensorIsNamed) {
  const shardscope::testing_files::ScratchPath dir("e2e_dumps");
  const std::string shape = " --seq 8 --batch 2 --hidden 16 --heads 4 --steps 1 --dump ";
  const auto single = dir / "single", tp = dir / "tp", loaded = dir / "loaded";
  ASSERT_EQ(run_cli("run --mode single" + shape + single.string()).exit_code, 0);
  ASSERT_EQ(run_cli("run --mode tp --degree 4" + shape + tp.string()).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(tp / "manifest.json"));
  EXPECT_TRUE(std::filesystem::exists(tp / "attn.qkv.weight.rank3.npy"));
  Result r = run_cli("check " + tp.string() + " " + single.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("29 of 29 tensors passed"));
  // A run loading a dump's weights and data (with another seed, so its own weights would differ;
  // no dropout, whose masks follow the seed) reproduces it.
  const auto plain = dir / "plain";
  ASSERT_EQ(run_cli("run --mode single --dropout 0" + shape + plain.string()).exit_code, 0);
  ASSERT_EQ(run_cli("run --mode tp-sp --degree 2 --dropout 0 --seed 7 --load " + plain.string() +
                    shape + loaded.string())
                .exit_code,
            0);
  r = run_cli("check " + loaded.string() + " " + plain.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  perturb_last_f32(tp / "mlp.fc1.weight.grad.npy");
  r = run_cli("check " + tp.string() + " " + single.string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("mlp.fc1.weight.grad"));
  EXPECT_THAT(r.output, HasSubstr("FAIL"));
  EXPECT_THAT(r.output, HasSubstr("28 of 29 tensors passed"));
  // The perturbed tensor left out, the rest passes; a misspelt name and shards of two degrees are
  // one line each, exit 2.
  r = run_cli("check " + tp.string() + " " + single.string() + " --ignore 'mlp.fc1.*'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("25 of 25 tensors passed (4 left out as asked)"));
  r = run_cli("check " + tp.string() + " " + single.string() + " --only output input.grad");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("2 of 2 tensors passed (27 left out as asked)"));
  r = run_cli("check " + tp.string() + " " + single.string() + " --only outptu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("shardscope: --only entry 'outptu' matches no tensor"));
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  r = run_cli("check " + tp.string() + " " + single.string() + " --shards");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("shardscope: --shards: A"));
  EXPECT_THAT(r.output, HasSubstr("their shards do not pair up"));
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
}

TEST(Cli, TheDebuggerReadsItsScriptFromStdin) {
  const shardscope::testing_files::ScratchPath script("debug_script.txt");
  {
    std::ofstream f(script);
    f << "next-collective\nwhere\nbogus\nquit\n";
  }
  const Result r = run_cli(
      "debug --mode tp --degree 2 --seq 8 --batch 2 --hidden 16 --heads 4 "
      "--steps 1 < " +
      script.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("rank 0: paused, stop 2 at op"));
  EXPECT_THAT(r.output, HasSubstr("rank 1: paused, stop 2 at op"));
  EXPECT_THAT(r.output, HasSubstr("attn.proj/reduce_from_tp forward"));
  EXPECT_THAT(r.output, HasSubstr("before all_reduce(count 256, f32, 2 ranks, activation)"));
  EXPECT_THAT(r.output, HasSubstr("unknown command 'bogus'; commands:"));
  EXPECT_THAT(r.output, HasSubstr("debug session ended; the run was stopped"));
}

TEST(Cli, AReportInAMissingFolderIsRefusedBeforeTheRun) {
  const Result r =
      run_cli("run --seq 4 --hidden 8 --heads 2 --steps 1 --report /nonexistent/x.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--report /nonexistent/x.json: the folder /nonexistent does "
                                  "not exist"));
}

TEST(Cli, MlpLnPrintsBothVerdictsAndRejectsAnFfnNotDivisibleByTheDegree) {
  const Result r = run_cli("mlp-ln --degree 4 --seq 4 --batch 2 --hidden 16 --ffn 32 --norm both");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("exact: equals the single-device LayerNorm (max rel err"));
  EXPECT_THAT(r.output, HasSubstr("local: a different model: output differs by"));
  EXPECT_THAT(r.output, HasSubstr("te.ops.LayerNorm"));
  EXPECT_THAT(r.output, HasSubstr("fc1.weight.grad"));
  const Result bad = run_cli("mlp-ln --ffn 30 --degree 4");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("ffn 30 must be divisible by degree 4 (each rank normalises "
                                    "ffn/degree features) (set by --ffn and --degree)"));
  EXPECT_EQ(count_lines(bad.output), 1) << bad.output;
}

TEST(Cli, AnInjectedFaultExitsOneNamingTheRankAndTheOp) {
  const std::string run =
      "run --mode tp-sp --degree 2 --seq 8 --batch 2 --hidden 16 --heads 2 --steps 1 "
      "--timeout-ms 1000 --inject-fault ";
  struct Case {
    const char* plan;
    const char* expected;
  };
  const Case cases[] = {
      {"rank=1,at=matmul", "rank 1: injected fault on rank 1 at matmul (op 'matmul'"},
      {"rank=1,at=all_gather,kind=wrong-size", "rank 1 calls all_gather(count 127, f32)"},
      {"rank=1,at=all_gather,kind=skip-collective",
       "injected fault: rank 1 skips all_gather(count 128, f32)"},
      {"rank=1,at=all_gather,kind=hang", "rank 1 has not arrived"},
      {"rank=1,at=all_to_all", "injected fault: rank 1 never reached all_to_all"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(run + c.plan);
    EXPECT_EQ(r.exit_code, 1) << c.plan << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("shardscope: error: ")) << c.plan;
    EXPECT_THAT(r.output, HasSubstr(c.expected)) << c.plan << "\n" << r.output;
  }
}

TEST(Cli, ABadInjectFaultExitsTwoWithOneLine) {
  struct Case {
    const char* args;
    const char* expected;
  };
  const Case cases[] = {
      {"run --inject-fault rank=0,at=matmul,kind=explode",
       "fault plan 'rank=0,at=matmul,kind=explode': kind 'explode' is not a fault kind; "
       "expected rank=R,at=OP[,kind=throw|wrong-size|skip-collective|hang]"},
      {"run --mode tp --degree 2 --inject-fault rank=2,at=matmul",
       "rank 2 is not a rank of this run: expected 0..1 (world 2) (set by --inject-fault and "
       "--degree)"},
      {"run --inject-fault at=matmul", "rank is missing"},
      {"debug --mode tp --degree 2 --inject-fault rank=1,at=matmul",
       "--inject-fault applies to shardscope run"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(std::string(c.args) + " < /dev/null");
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(c.expected)) << c.args;
    EXPECT_EQ(count_lines(r.output), 1) << c.args << "\n" << r.output;
  }
}

// The losses column of a run's step table: "   0    1.993768" per step (time left out).
std::vector<std::string> loss_lines(const std::string& output) {
  std::vector<std::string> out;
  std::size_t start = output.find("step        loss");
  while (start != std::string::npos) {
    start = output.find('\n', start);
    if (start == std::string::npos) break;
    const std::string line = output.substr(start + 1, 16);
    if (line.size() < 16 || line[3] < '0' || line[3] > '9') break;
    out.push_back(line);
    ++start;
  }
  return out;
}

// A learning rate of 1e30 makes the weights ~1e28 after step 0; at step 1 the QKV product
// overflows f32. Without the guard the run goes on with NaN losses; with it the run stops there.
TEST(Cli, CheckFiniteNamesTheFirstOpThatOverflowsWhenARunDiverges) {
  const std::string args = "run --seq 8 --batch 2 --hidden 16 --heads 2 --steps 3 --lr 1e30";
  const Result unchecked = run_cli(args);  // the loss ends it, without the op (cli_errors_test)
  ASSERT_EQ(unchecked.exit_code, 1) << unchecked.output;
  EXPECT_THAT(unchecked.output, HasSubstr("step 1: the loss is not finite"));
  const Result r = run_cli(args + " --check-finite");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("shardscope: error: 1 rank(s) failed"));
  EXPECT_THAT(r.output, HasSubstr("op 'matmul' in attn.qkv (layer 0, forward, rank 0): output 0 "
                                  "f32[8, 2, 48] is not finite at step 1"));
  EXPECT_THAT(r.output, HasSubstr("every input is finite: this op made them"));
}

// On a healthy run the guard finds nothing and changes no number.
TEST(Cli, CheckFiniteLeavesAHealthyRunAsItIs) {
  const std::string args =
      "run --mode tp-sp --degree 2 --seq 8 --batch 2 --hidden 16 --heads 2 --steps 3";
  const Result plain = run_cli(args);
  const Result checked = run_cli(args + " --check-finite");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_THAT(checked.output, HasSubstr("every output and gradient checked for NaN/Inf"));
  EXPECT_THAT(plain.output, Not(HasSubstr("checked for NaN/Inf")));
  const std::vector<std::string> losses = loss_lines(plain.output);
  EXPECT_EQ(losses.size(), 3u) << plain.output;
  EXPECT_EQ(loss_lines(checked.output), losses);
}

// The last line of `output`.
std::string last_line(const std::string& output) {
  const std::size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const std::size_t begin = output.rfind('\n', end);
  return output.substr(begin == std::string::npos ? 0 : begin + 1,
                       end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

// `shardscope lab N` on a fresh starter ends with how many tests pass and the next TODO, the
// function and its file, in place of GoogleTest's list of failed tests; with a filter, the next
// TODO is the one the tests that ran need. (lab_01_starter is built with this binary: the lab
// command's own build finds nothing to do.)
TEST(Cli, LabEndsWithHowManyTestsPassAndTheNextTodo) {
  const Result all = run_cli("lab 1");
  EXPECT_EQ(all.exit_code, 1) << all.output;
  EXPECT_THAT(last_line(all.output),
              ::testing::MatchesRegex("lab 1 \\(starter\\): 0 of [1-9][0-9]* tests pass; next: "
                                      "implement gelu_backward in labs/01-autograd/starter.cpp"))
      << all.output;
  EXPECT_THAT(all.output, Not(HasSubstr("listed below")));
  EXPECT_THAT(all.output, HasSubstr("not implemented yet: layernorm_backward"));  // shown as run
  const Result softmax = run_cli("lab 1 --filter 'Softmax*'");
  EXPECT_EQ(softmax.exit_code, 1) << softmax.output;
  EXPECT_THAT(last_line(softmax.output),
              ::testing::MatchesRegex("lab 1 \\(starter\\): 0 of [1-9][0-9]* tests pass; next: "
                                      "implement softmax_backward in "
                                      "labs/01-autograd/starter.cpp"))
      << softmax.output;
}

}  // namespace
