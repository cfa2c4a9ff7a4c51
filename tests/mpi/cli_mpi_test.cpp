// `mpiexec -n 4 shardscope run --comm mpi` against the same run on threads, in every parallel
// mode: the communication and memory figures are identical, both checks pass, and the losses
// agree to f32 rounding (MPI may sum a reduction in another order than ThreadComm's rank order,
// which moves the last bits of the errors and losses).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

int run(const std::string& command) {
  const int status = std::system((command + " > /dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

nlohmann::json load(const std::filesystem::path& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

TEST(CliMpi, ReportsEqualTheThreadsRunInEveryMode) {
  const auto dir = std::filesystem::temp_directory_path() / "shardscope_cli_mpi";
  std::filesystem::create_directories(dir);
  for (const char* mode : {"tp", "tp-sp", "ulysses"}) {
    SCOPED_TRACE(mode);
    const std::string args = std::string(" run --mode ") + mode +
                             " --degree 4 --seq 16 --batch 2 --hidden 32 --heads 4 --steps 2";
    const auto threads = dir / (std::string(mode) + "-threads.json");
    const auto mpi = dir / (std::string(mode) + "-mpi.json");
    ASSERT_EQ(run(std::string(SHARDSCOPE_EXE) + args + " --report " + threads.string()), 0);
    ASSERT_EQ(run(std::string(SHARDSCOPE_MPIEXEC) + " " + SHARDSCOPE_EXE + args +
                  " --comm mpi --report " + mpi.string()),
              0);
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
  std::filesystem::remove_all(dir);
}

}  // namespace
