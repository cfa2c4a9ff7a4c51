// Atomic file writes: a temporary beside the file, renamed into place.
#include "io/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace shardscope {
namespace {

// The system's text for the last error, or a plain one when the library left errno at 0.
std::string system_reason(int error) {
  return error != 0 ? std::strerror(error) : "input/output error";
}

}  // namespace

FileWriteError::FileWriteError(const std::string& path, const std::string& what,
                               const std::string& reason)
    : Error(path + ": " + what + " (" + reason + ")"), failure_(what + " (" + reason + ")") {}

std::string temporary_name_beside(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path p(path);
  const std::string name = "." + p.filename().string() + ".tmp-" + std::to_string(getpid()) + "-" +
                           std::to_string(counter++);
  return (p.parent_path() / name).string();
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  const std::string temporary = temporary_name_beside(path);
  const auto discard = [&] { std::remove(temporary.c_str()); };
  errno = 0;
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out) throw FileWriteError(path, "cannot create the file", system_reason(errno));
  errno = 0;  // a failed write leaves the system's reason here, whichever call failed
  try {
    write(out);
  } catch (...) {
    out.close();
    discard();
    throw;
  }
  if (out) out.flush();
  if (out) out.close();
  if (!out) {
    const int error = errno;
    discard();
    throw FileWriteError(path, "writing failed", system_reason(error));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    discard();
    throw FileWriteError(path, "cannot rename it into place", system_reason(error));
  }
}

}  // namespace shardscope
