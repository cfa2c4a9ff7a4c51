// The flags of `shardscope run`, shared by every front end that starts the layer run (run,
// debug, and shardscope-viz's live mode), so they spell and check them the same way.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "apps/run.h"

namespace shardscope {

struct RunFlags {
  RunOptions options;
  std::string mode = "single", dtype = "f32", comm = "threads";
  bool no_check = false;

  // Adds --mode, --degree, --seq, ... to `app`; with `outputs`, also --report, --dump, --load
  // and --trace (the files a run writes or reads).
  void add_to(CLI::App& app, bool outputs = true);
  // The options the flags give. Throws ArgumentError naming the flag and the rule; `timeout_set`
  // says whether --timeout-ms was given (it applies to threads only).
  RunOptions resolve(bool timeout_set) const;
  // Whether `name` ("--mode") is one of the flags add_to adds.
  static bool is_run_flag(const std::string& name);
};

DType parse_dtype(const std::string& name);  // "f32" or "f64", else ArgumentError

}  // namespace shardscope
