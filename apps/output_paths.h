// The files a run writes (--report, --trace, --dump), checked before any rank starts so that a
// mistake in a path costs nothing: each refusal is an ArgumentError naming the flag, the path as
// given and the reason.
#pragma once

#include <string>

namespace shardscope {

// --report FILE and --trace FILE: FILE is not a folder, and its folder exists and is writable.
// `flag` is how the error names it ("--trace"). An existing file is replaced (atomically).
void check_output_file(const std::string& flag, const std::string& path);

// --dump DIR: its parent folder is writable (missing folders above DIR are created: the nearest
// existing one must be a writable folder), and DIR is either absent, an empty
// folder, or (with `overwrite`, --overwrite) a dump (a folder holding manifest.json). A file, or a
// folder of other things, is never replaced.
void check_dump_folder(const std::string& flag, const std::string& dir, bool overwrite);

}  // namespace shardscope
