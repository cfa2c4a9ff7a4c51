// The output paths of a run, checked before it starts.
#include "apps/output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "autograd/errors.h"
#include "io/manifest.h"

namespace shardscope {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void refuse(const std::string& flag, const std::string& path, const std::string& why) {
  throw ArgumentError(flag + " " + path + ": " + why);
}

// The folder `path` goes in ("." for a bare name), which must be writable and exist, or with
// `create_missing` the nearest of its ancestors that exists (the missing ones will be created).
void check_parent(const std::string& flag, const std::string& path, const fs::path& target,
                  bool create_missing = false) {
  fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  fs::file_status status = fs::status(parent, ec);
  while (create_missing && !fs::exists(status) && parent.has_relative_path() && parent != ".") {
    parent = parent.parent_path().empty() ? fs::path(".") : parent.parent_path();
    status = fs::status(parent, ec);
  }
  if (!fs::exists(status)) {
    refuse(flag, path, "the folder " + parent.string() + " does not exist (create it first)");
  }
  if (!fs::is_directory(status)) refuse(flag, path, parent.string() + " is not a folder");
  if (access(parent.c_str(), W_OK | X_OK) != 0) {
    refuse(flag, path,
           "the folder " + parent.string() + " is not writable (" + std::strerror(errno) + ")");
  }
}

}  // namespace

void check_output_file(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const fs::path target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec) || !target.has_filename()) {
    refuse(flag, path,
           "is a folder; give a file name (such as " +
               (target / (flag == "--trace" ? "trace.json" : "report.json")).string() + ")");
  }
  check_parent(flag, path, target);
}

void check_dump_folder(const std::string& flag, const std::string& dir, bool overwrite) {
  if (dir.empty()) return;
  fs::path target(dir);
  if (!target.has_filename() && target.has_parent_path()) target = target.parent_path();
  check_parent(flag, dir, target, /*create_missing=*/true);
  std::error_code ec;
  const fs::file_status status = fs::status(target, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status)) refuse(flag, dir, "exists and is not a folder");
  if (fs::is_empty(target, ec)) return;
  if (!fs::exists(target / kManifestFile, ec)) {
    refuse(flag, dir,
           "is a folder that holds files but no dump (no " + std::string(kManifestFile) +
               "): choose an empty or new folder");
  }
  if (!overwrite) {
    refuse(flag, dir, "already holds a dump; give --overwrite to replace it, or another folder");
  }
  if (access(target.c_str(), W_OK | X_OK) != 0) {
    refuse(flag, dir, "the dump cannot be replaced (" + std::string(std::strerror(errno)) + ")");
  }
}

}  // namespace shardscope
