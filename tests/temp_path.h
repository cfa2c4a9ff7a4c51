// Where a test writes its files: the temporary folder, under a name with the process id in it.
// ctest runs tests in parallel processes, and two runs of the suite may share a machine (a preset's
// run beside another's, a developer's beside CI's): under a fixed name one run deleted or rewrote
// another's files mid-run (CliMpi.ReportsEqualTheThreadsRunInEveryMode failed so, its MPI run
// ending with exit code 1 when another process had removed its folder).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace shardscope::testing_files {

// <temp>/shardscope_<pid>_<name>: a file or a folder of this process's own.
inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("shardscope_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace shardscope::testing_files
