// Atomic file writes: a file is written to a temporary beside it (same folder, so the rename stays
// on one file system) and renamed into place, so a reader sees the old file or the whole new one,
// never half of it; the temporary is removed when anything fails. Used for every file a run
// writes (traces, reports, .npy files, manifests).
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "autograd/errors.h"

namespace shardscope {

// A file that could not be written: what() is "PATH: WHAT (REASON)", where PATH is the file the
// caller named (never the temporary), WHAT the stage ("cannot create the file", "writing failed",
// "cannot rename it into place") and REASON the system's text (strerror).
class FileWriteError : public Error {
 public:
  FileWriteError(const std::string& path, const std::string& what, const std::string& reason);
  // "WHAT (REASON)", without the path, for callers that put the path in their own words.
  const std::string& failure() const { return failure_; }

 private:
  std::string failure_;
};

// A fresh name beside `path` for its temporary: "DIR/.NAME.tmp-PID-N", unique in this process
// (N counts) and among processes (PID), hidden from `ls`.
std::string temporary_name_beside(const std::string& path);

// Calls `write` with a stream into a temporary beside `path`, then renames it to `path`. Throws
// FileWriteError when the temporary cannot be created, written or renamed (the temporary is
// removed); an exception from `write` is passed on, the temporary removed too.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);

}  // namespace shardscope
