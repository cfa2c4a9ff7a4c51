// `shardscope run`: the layer in any mode on threads or MPI ranks, with its loss per step, the
// reference check, the communication table and the memory table.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "parallel/comm/spmd.h"
#include "parallel/run/layer_run.h"

namespace shardscope {

// The defaults are the command line's (docs/user-guide.md).
struct RunOptions {
  RunOptions() {
    spec.layer.seq = 64;
    spec.layer.batch = 2;
    spec.layer.hidden = 128;
    spec.layer.heads = 4;
  }
  LayerRunSpec spec;
  CommKind comm = CommKind::threads;
  DeviceKind backend = DeviceKind::cpu;  // cuda: comm nccl or threads (resolve_comm_and_backend)
  bool check_calls = true;               // nccl: the host-side check before every NCCL call
  int timeout_ms = 10000;
  std::string report_path;  // empty: no JSON report
  std::string dump_dir;     // empty: no dump (.npy files and manifest.json, docs/dump-format.md)
  std::string load_dir;     // empty: weights and data from the seed; else from this dump
  std::string trace_path;   // empty: no trace (Chrome trace events, docs/trace-format.md)
  bool overwrite = false;   // --overwrite: --dump may replace an existing dump
  std::size_t trace_events = 2'000'000;  // the most events the trace keeps (TraceOptions)
  int log_every = 0;               // a step-table line every N steps; 0: log_interval's choice
  std::optional<FaultPlan> fault;  // --inject-fault: a rank misbehaves on purpose

  // Throws ArgumentError naming the flag and the rule, before any rank starts; this includes the
  // output paths (apps/output_paths.h), so a run never ends unable to write its files.
  void validate() const;
};

// The step table's interval: `log_every` when given (> 0), else every step up to 50 steps and
// a line every ceil(steps / 20) steps beyond (about 20 lines); the last step is always printed.
int log_interval(int log_every, int steps);

// "cpu", "cuda" or "reference", else ArgumentError naming the accepted values.
DeviceKind parse_backend(const std::string& name);
const char* backend_name(DeviceKind kind);  // "cpu", "cuda", "reference"

// Whether each rank of this run is a process of its own (--comm mpi, or nccl under mpirun).
bool ranks_are_processes(CommKind comm);

// For --backend cuda: the devices, driver, runtime, cuBLAS and NCCL versions, one per line, and
// where the `degree` ranks run: a device each over NCCL, or threads sharing the devices with their
// collectives staged through host memory.
void print_cuda_banner(CommKind comm, int degree, std::ostream& out);

struct RunResult {
  RankRun rank0;                   // steps, comm and check of rank 0
  std::vector<RankMemory> memory;  // one entry per rank; rank 0's with its terms
  bool printed = true;             // false on MPI ranks other than 0
  // Where the measurements differ from the models (model_differences); empty when they agree.
  std::vector<std::string> model_differences;
  // Files that could not be written after the tables were printed ("--trace PATH: REASON"), and
  // what the user should know about a file that was (dropped trace events), one line each.
  std::vector<std::string> file_errors;
  std::vector<std::string> warnings;
};

// Runs every rank and prints (on rank 0) the step table, then the check, communication and
// memory tables to `out`; then writes the trace (a failure goes to file_errors: the tables are
// printed whatever happens to a file).
RunResult run_layer(const RunOptions& options, std::ostream& out);

// The header, step, check, communication and memory tables of a finished run (rank 0), and the
// model differences (which it fills in `result`).
void print_tables(const RunOptions& options, RunResult& result, std::ostream& out);
void print_check_table(const CheckResult& check, std::ostream& out);
// A 2-byte run's step 0 against the f32 single-device layer (RankRun::f32_check).
void print_f32_check_table(const CheckResult& check, std::ostream& out);
void print_comm_table(const std::vector<CommLine>& measured, const std::vector<CommLine>& model,
                      std::ostream& out);
void print_memory_table(const RankMemory& memory, const LayerConfig& config, std::ostream& out);
// Every place where measured saved-activation bytes (each rank's total, rank 0's terms) or rank 0's
// collectives (count and ring bytes of the activation and parameter-gradient lines) differ from the
// models, one line each; empty when everything matches.
std::vector<std::string> model_differences(const std::vector<RankMemory>& memory,
                                           const std::vector<CommLine>& measured,
                                           const std::vector<CommLine>& model);

}  // namespace shardscope
