// write_file_atomically: the file is the old one or the whole new one, never half; no temporary
// is left behind; a failure names the path given and the system's reason.
#include "io/atomic_file.h"
#include "tests/temp_path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace shardscope {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test and process: ctest runs these tests in parallel processes.
    dir_ = shardscope::testing_files::temp_path(
        "atomic_file_test_" +
        std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string read(const fs::path& p) const {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  int entries() const {
    return static_cast<int>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

TEST_F(AtomicFileTest, ReplacesTheFileWholeAndLeavesNoTemporary) {
  const fs::path file = dir_ / "a.txt";
  write_file_atomically(file.string(), [](std::ostream& out) { out << "first"; });
  write_file_atomically(file.string(), [](std::ostream& out) { out << "second"; });
  EXPECT_EQ(read(file), "second");
  EXPECT_EQ(entries(), 1);
}

TEST_F(AtomicFileTest, AWriterThatThrowsLeavesTheOldFileAndNoTemporary) {
  const fs::path file = dir_ / "a.txt";
  write_file_atomically(file.string(), [](std::ostream& out) { out << "old"; });
  EXPECT_THROW(write_file_atomically(file.string(),
                                     [](std::ostream& out) {
                                       out << "half of the new";
                                       throw std::runtime_error("stopped");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read(file), "old");
  EXPECT_EQ(entries(), 1);
}

TEST_F(AtomicFileTest, AFailureNamesThePathAndTheSystemsReason) {
  const std::string file = (dir_ / "missing" / "a.txt").string();
  EXPECT_THAT([&] { write_file_atomically(file, [](std::ostream& out) { out << "x"; }); },
              ::testing::ThrowsMessage<FileWriteError>(
                  AllOf(HasSubstr(file + ": cannot create the file (No such file or directory)"),
                        ::testing::Not(HasSubstr(".tmp")))));
  EXPECT_EQ(entries(), 0);
}

}  // namespace
}  // namespace shardscope
