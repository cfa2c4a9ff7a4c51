// End-to-end: `shardscope run --backend` and `--comm nccl`. Flags that cannot work together and
// unknown names exit 2 with one line naming the accepted values or the flag to change. On a
// machine with too few CUDA devices (this test asks the CUDA runtime itself, so it knows which case
// it is in) a CUDA run exits 2 with one line saying how many devices it needs and found, and why:
// a device per rank for --comm nccl, one for ranks as threads sharing it; with enough devices it
// runs, prints the backend banner with where the ranks run, and passes its check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/apps/cli_testing.h"

#include "parallel/comm/gpu_info.h"
#include "tests/temp_path.h"

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using shardscope::testing::count_lines;
using shardscope::testing::Result;
using shardscope::testing::run_cli;

constexpr const char* kSmall = " --seq 16 --batch 2 --hidden 32 --heads 4 --steps 1";

TEST(CliBackend, UnknownOrIncompatibleChoicesExit2WithOneLine) {
  struct Case {
    const char* args;
    const char* expected;
  };
  const Case cases[] = {
      {"run --backend bogus", "--backend bogus is not a backend: expected cpu, cuda or reference"},
      {"run --backend reference --comm nccl", "it needs --backend cuda, given reference"},
      {"run --backend cuda --comm mpi", "--backend cuda runs with --comm nccl"},
      {"run --backend cpu --comm nccl", "--comm nccl moves CUDA device memory"},
      {"run --comm smoke-signals", "expected threads, mpi or nccl"},
      {"run --no-call-check", "--no-call-check applies to --comm nccl"},
      {"debug --backend cuda", "--backend must be cpu or reference, given cuda"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_THAT(r.output, StartsWith("shardscope: ")) << c.args;
    EXPECT_THAT(r.output, HasSubstr(c.expected)) << c.args;
    EXPECT_EQ(count_lines(r.output), 1) << c.args << "\n" << r.output;
  }
}

// `run --backend cuda` at degrees 1 and 4 and `--comm threads` at degree 2 (one device: the ranks
// share it) and `run --comm nccl --degree 2` (two): a clear launch error where the devices are
// missing, a checked run where they are there.
TEST(CliBackend, CudaRunsNeedTheirDevices) {
  const shardscope::CudaDeviceCount found = shardscope::count_cuda_devices();
  struct Case {
    std::string args;
    int devices;
    const char* launch;  // how the launch error names the run
  };
  const Case cases[] = {
      {std::string("run --backend cuda") + kSmall, 1, "--backend cuda --comm "},
      {std::string("run --backend cuda --mode tp-sp --degree 4") + kSmall, 1,
       "--backend cuda --comm "},
      {std::string("run --backend cuda --comm threads --mode ulysses --degree 2") + kSmall, 1,
       "--backend cuda --comm threads (ranks sharing the devices)"},
      {std::string("run --comm nccl --mode tp --degree 2") + kSmall, 2,
       "--backend cuda --comm nccl (one thread per device)"},
  };
  for (const Case& c : cases) {
    const Result r = run_cli(c.args);
    if (found.count < c.devices) {
      EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
      EXPECT_THAT(r.output, StartsWith(std::string("shardscope: ") + c.launch)) << c.args;
      EXPECT_THAT(r.output, HasSubstr("needs " + std::to_string(c.devices) + " CUDA device"));
      EXPECT_THAT(r.output, HasSubstr("found " + std::to_string(found.count)));
      if (found.count == 0) {
        EXPECT_THAT(r.output, HasSubstr(found.why_none));
      }
      EXPECT_EQ(count_lines(r.output), 1) << c.args << "\n" << r.output;
    } else {
      EXPECT_EQ(r.exit_code, 0) << c.args << "\n" << r.output;
      EXPECT_THAT(r.output, StartsWith("backend cuda:\n"));
      EXPECT_THAT(r.output, HasSubstr("NCCL "));
      EXPECT_THAT(r.output, HasSubstr("  ranks: "));
      EXPECT_THAT(r.output, HasSubstr("backend cuda\n"));  // the end of the run's header line
      EXPECT_THAT(r.output, HasSubstr("match"));
    }
  }
}

TEST(CliBackend, TheReportNamesTheBackend) {
  const shardscope::testing_files::ScratchPath path("backend_report.json");
  const Result r = run_cli(std::string("run") + kSmall + " --report " + path.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("backend cpu\n"));
  std::ifstream file(path);
  ASSERT_TRUE(file) << "no report at " << path;
  const nlohmann::json j = nlohmann::json::parse(file);
  EXPECT_EQ(j["config"]["backend"], "cpu");
  EXPECT_EQ(j["config"]["comm"], "threads");
  EXPECT_EQ(j["config"]["call_check"], false);
}

// The losses of step `step` as the run prints them ("   0    1.234567    12.345").
double step_loss(const std::string& output, int step) {
  const std::string head = "step        loss     time_ms\n";
  const std::size_t at = output.find(head);
  if (at == std::string::npos) return std::nan("");
  std::size_t line = at + head.size();
  for (int i = 0; i < step; ++i) line = output.find('\n', line) + 1;
  int index = -1;
  double loss = std::nan("");
  std::sscanf(output.c_str() + line, "%d %lf", &index, &loss);
  return index == step ? loss : std::nan("");
}

// `run --backend reference` under tensor parallelism (and TP-SP, whose LayerNorm reads host
// memory) on threads: it runs, names its backend, passes its check against the single-device
// layer (which the run's check builds on the CPU backend, so the check compares the backends too),
// and its losses are the CPU backend's to the 6 printed digits.
TEST(CliBackend, ReferenceBackendRunsTensorParallelAndMatchesTheCpuLosses) {
  for (const char* mode : {"tp", "tp-sp"}) {
    const std::string args = std::string(" --mode ") + mode + " --degree 2 --dtype f64 --steps 2" +
                             " --seq 16 --batch 2 --hidden 32 --heads 4 --dropout 0.1";
    const Result ref = run_cli("run --backend reference" + args);
    ASSERT_EQ(ref.exit_code, 0) << mode << "\n" << ref.output;
    EXPECT_THAT(ref.output, HasSubstr("backend reference,"));
    EXPECT_THAT(ref.output, HasSubstr("match"));
    const Result cpu = run_cli("run --backend cpu" + args);
    ASSERT_EQ(cpu.exit_code, 0) << mode << "\n" << cpu.output;
    for (int step : {0, 1}) {
      const double a = step_loss(ref.output, step), b = step_loss(cpu.output, step);
      ASSERT_FALSE(std::isnan(a) || std::isnan(b)) << mode << " step " << step << "\n"
                                                   << ref.output << cpu.output;
      EXPECT_NEAR(a, b, 1e-6 * std::abs(b)) << mode << " step " << step;  // printed to 6 places
    }
  }
}

}  // namespace
