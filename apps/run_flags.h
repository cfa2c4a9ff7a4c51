// The flags of `shardscope run`, shared by every front end that starts the layer run (run,
// debug, and shardscope-viz's live mode), so they spell and check them the same way.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/run.h"

namespace shardscope {

struct RunFlags {
  RunOptions options;
  std::string mode = "single", dtype = "f32";
  // --model sets the layer's kind (apply_model); --norm, --mlp, --ffn, --no-bias, --rope and
  // --dropout, when given, override it.
  std::string model = "gpt";
  std::string norm, mlp;  // empty: the model's
  std::string recompute = "none";
  std::optional<double> dropout;  // unset: the model's
  bool no_bias = false;
  // Empty when not given: --comm nccl implies --backend cuda, and --backend cuda implies --comm
  // nccl when every rank can have a CUDA device of its own (or under mpirun), else --comm threads
  // (the ranks share the devices); otherwise cpu and threads.
  std::string comm, backend;
  // --plant-bug: a name of parallel/layers/planted_bug.h's catalogue, or kRandomBug
  // (choose_random_bug from --seed; the run never prints which).
  std::string plant_bug = "none";
  static constexpr const char* kRandomBug = "random";
  bool no_check = false, no_call_check = false;
  std::optional<std::string> inject_fault;  // the text of --inject-fault, when given
  std::optional<int> check_steps;           // --check-steps, when given

  // Adds --mode, --degree, --seq, ... to `app`; with `outputs`, also --report, --dump, --load,
  // --trace and the flags about them (the files a run writes or reads, and --log-every).
  void add_to(CLI::App& app, bool outputs = true);
  // The options the flags give. Throws ArgumentError naming the flag and the rule; `timeout_set`
  // says whether --timeout-ms was given (it applies to threads only).
  RunOptions resolve(bool timeout_set) const;
  // Whether `name` ("--mode") is one of the flags add_to adds.
  static bool is_run_flag(const std::string& name);
};

DType parse_dtype(const std::string& name);  // "f32" or "f64", else ArgumentError

// An argument error as the command line says it: the library's message and, for a ConfigError
// (which names the configuration's fields), the flags that set them: "hidden 30 must be
// divisible by heads 4 (each head gets hidden/heads features) (set by --hidden and --heads)".
// Only the command line knows its flags; a field no flag sets is left out.
std::string with_flags(const ArgumentError& e);
// The communicator and backend of a run from --comm and --backend (either may be empty: not
// given): nccl implies cuda; cuda implies default_cuda_comm's choice; else cpu and threads.
// RunOptions::validate refuses the pairs that cannot work. Unknown names are ArgumentErrors naming
// the accepted values. Counts the CUDA devices only when --backend cuda comes without --comm.
void resolve_comm_and_backend(const std::string& comm, const std::string& backend,
                              RunOptions& options);
// The communicator of --backend cuda without --comm: nccl under mpirun (a process per device) or
// when this build has NCCL and `devices` >= `degree` (a device per rank); otherwise threads, the
// ranks sharing the devices with their collectives staged through host memory.
CommKind default_cuda_comm(int degree, int devices, bool nccl_built, bool under_mpirun);

}  // namespace shardscope
