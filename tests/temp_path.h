// Where a test writes its files: the temporary folder, under a name with the process id in it.
// ctest runs tests in parallel processes, and two runs of the suite may share a machine (a preset's
// run beside another's, a developer's beside CI's): under a fixed name one run deleted or rewrote
// another's files mid-run (CliMpi.ReportsEqualTheThreadsRunInEveryMode failed so, its MPI run
// ending with exit code 1 when another process had removed its folder).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace shardscope::testing_files {

// <temp>/shardscope_<pid>_<name>: a file or a folder of this process's own.
inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("shardscope_" + std::to_string(::getpid()) + "_" + name);
}

// temp_path(name) as a path to use, emptied when made (a folder made too, for Kind::folder) and
// removed with all under it when the object goes: a test that an ASSERT ends early leaves nothing
// behind either.
class ScratchPath : public std::filesystem::path {
 public:
  enum Kind { file, folder };
  explicit ScratchPath(const std::string& name, Kind kind = file)
      : std::filesystem::path(temp_path(name)) {
    std::filesystem::remove_all(*this);
    if (kind == folder) std::filesystem::create_directories(*this);
  }
  ~ScratchPath() {
    std::error_code ignored;
    std::filesystem::remove_all(*this, ignored);
  }
  ScratchPath(const ScratchPath&) = delete;
  ScratchPath& operator=(const ScratchPath&) = delete;
};

}  // namespace shardscope::testing_files
