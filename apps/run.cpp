// `shardscope run`: launch the ranks, then print what rank 0 saw.
#include "apps/run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <memory>
#include <mutex>
#include <optional>

#include "apps/load_check.h"
#include "apps/memory_check.h"
#include "apps/output_paths.h"
#include "autograd/cuda/cuda_backend.h"
#include "autograd/errors.h"
#include "io/dump.h"
#include "io/manifest.h"
#include "io/trace_reader.h"
#include "io/trace_recorder.h"
#include "parallel/comm/gpu_info.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/models/comm_model.h"

namespace shardscope {
namespace {

// ", checked against the single-device layer at every step" and the like, for the banner.
std::string check_scope(const RunOptions& o) {
  if (o.spec.layer.mode == ParallelMode::single) return "";
  if (!o.spec.check) return ", not checked (--no-check)";
  const int steps =
      o.spec.check_steps < 0 ? o.spec.steps : std::min(o.spec.check_steps, o.spec.steps);
  if (steps == o.spec.steps) return ", checked against the single-device layer at every step";
  return ", checked against the single-device layer at steps 0-" + std::to_string(steps - 1);
}

void print_header(const RunOptions& o, std::ostream& out) {
  const LayerConfig& c = o.spec.layer;
  out << "shardscope run: mode " << mode_name(c.mode) << ", degree " << c.degree << " ("
      << comm_kind_name(o.comm) << "), " << c.shape_text() << ", dropout " << c.dropout << ", "
      << dtype_name(c.dtype) << ", seed " << c.seed << ", " << o.spec.steps
      << (o.spec.steps == 1 ? " SGD step (lr " : " SGD steps (lr ") << o.spec.learning_rate
      << "), backend " << backend_name(o.backend)
      << (o.spec.check_finite ? ", every output and gradient checked for NaN/Inf" : "")
      << check_scope(o) << "\n";
}

void print_steps(const std::vector<StepRecord>& steps, int every, std::ostream& out) {
  out << "step        loss     time_ms"
      << (every > 1 ? "   (every " + std::to_string(every) + " steps, and the last; --log-every)"
                    : "")
      << "\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (i % static_cast<std::size_t>(every) != 0 && i + 1 != steps.size()) continue;
    char line[96];
    std::snprintf(line, sizeof line, "%4zu %11.6f %11.3f\n", i, steps[i].loss, steps[i].time_ms);
    out << line;
  }
  out << "(time_ms leaves out the reference check and the dump)\n";
}

// Each line of `text` indented by two spaces.
void print_indented(const std::string& text, std::ostream& out) {
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    out << "  " << text.substr(start, end - start) << "\n";
    start = end + 1;
  }
}

// A line per problem of the trace after the run: events it dropped.
void note_dropped_events(const TraceRecorder& recorder, const RunOptions& o, RunResult& result) {
  const TraceMeta meta = recorder.meta();
  if (meta.dropped_events == 0) return;
  result.warnings.push_back(
      "--trace " + o.trace_path + ": the trace keeps its first " + std::to_string(meta.max_events) +
      " events and dropped " + std::to_string(meta.dropped_events) + " later ones, from step " +
      std::to_string(meta.first_dropped_step) +
      " on (the file says so in otherData.dropped_events; --trace-events raises the bound, "
      "fewer --steps shorten the run)");
}

}  // namespace

int log_interval(int log_every, int steps) {
  if (log_every > 0) return log_every;
  return steps <= 50 ? 1 : (steps + 19) / 20;
}

DeviceKind parse_backend(const std::string& name) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "cuda") return DeviceKind::cuda;
  if (name == "reference") return DeviceKind::reference;
  throw ArgumentError("--backend " + name + " is not a backend: expected cpu, cuda or reference");
}

const char* backend_name(DeviceKind kind) {
  return device_kind_name(kind);
}

bool ranks_are_processes(CommKind comm) {
  return comm == CommKind::mpi || (comm == CommKind::nccl && launched_by_mpirun());
}

void print_cuda_banner(CommKind comm, int degree, std::ostream& out) {
  out << "backend cuda:\n";
  print_indented(cuda_device_report(), out);
  print_indented(nccl_version_report(), out);
  if (comm != CommKind::threads) {
    out << "  ranks: " << degree << (ranks_are_processes(comm) ? " process(es)" : " thread(s)")
        << ", a CUDA device each, collectives over NCCL\n";
    return;
  }
  const int devices = cuda_device_count();
  const std::vector<Device> placed = thread_rank_devices(degree, DeviceKind::cuda, devices);
  out << "  ranks: " << degree << " thread(s) sharing " << std::min(devices, degree)
      << " CUDA device(s) (";
  for (std::size_t r = 0; r < placed.size(); ++r) {
    out << (r ? ", " : "") << "rank " << r << " on " << placed[r].str();
  }
  out << "), collectives over ThreadComm staged through host memory"
      << (devices < degree ? " (fewer CUDA devices than ranks)" : "") << "\n";
}

void RunOptions::validate() const {
  spec.layer.validate();
  if (spec.steps < 1)
    throw ArgumentError("--steps must be >= 1, given " + std::to_string(spec.steps));
  if (!(std::isfinite(spec.learning_rate) && spec.learning_rate > 0)) {
    throw ArgumentError("--lr must be a finite number > 0, given " +
                        std::to_string(spec.learning_rate));
  }
  if (spec.keep_gathered_input && spec.layer.mode != ParallelMode::tp_sp) {
    throw ArgumentError("--keep-gathered-input applies to --mode tp-sp only");
  }
  if (timeout_ms < 1) throw ArgumentError("--timeout-ms must be >= 1");
  if (log_every < 0) {
    throw ArgumentError("--log-every must be >= 1, given " + std::to_string(log_every));
  }
  if (trace_events < 1 || trace_events > TraceRecorder::kMaxEvents) {
    throw ArgumentError("--trace-events must be in [1, " +
                        std::to_string(TraceRecorder::kMaxEvents) + "], given " +
                        std::to_string(trace_events));
  }
  check_output_file("--report", report_path);
  check_output_file("--trace", trace_path);
  check_dump_folder("--dump", dump_dir, overwrite);
  if (fault) check_fault_plan(*fault, spec.layer.degree, check_calls);
  if (is_half(spec.layer.dtype)) {  // the 2-byte types run on the host's kernels, over threads
    const std::string dtype = std::string("--dtype ") + dtype_name(spec.layer.dtype);
    if (backend == DeviceKind::cuda) {
      throw ArgumentError(dtype +
                          " runs on --backend cpu or reference (the CUDA kernels run f32 "
                          "and f64)");
    }
    if (comm != CommKind::threads) {
      throw ArgumentError(dtype + " runs with --comm threads (MpiComm moves f32, f64 and u8)");
    }
    if (spec.layer.dtype == DType::bf16 && !dump_dir.empty()) {
      throw ArgumentError(
          "--dump writes NumPy files, and NumPy has no bfloat16: dump an f32 or "
          "f16 run");
    }
  }
  // MpiComm moves host memory, NcclComm device memory; ThreadComm stages device buffers.
  if (backend == DeviceKind::cuda && comm == CommKind::mpi) {
    throw ArgumentError(
        "--backend cuda runs with --comm nccl (a CUDA device per rank) or --comm threads (ranks "
        "sharing the devices); --comm mpi moves host memory (it runs with --backend cpu or "
        "reference)");
  }
  if (backend != DeviceKind::cuda && comm == CommKind::nccl) {
    throw ArgumentError("--comm nccl moves CUDA device memory: it needs --backend cuda, given " +
                        std::string(backend_name(backend)));
  }
}

// The run's spec with the dump and load hooks of --dump and --load filled in.
LayerRunSpec spec_with_io(const RunOptions& options) {
  LayerRunSpec spec = options.spec;
  if (!options.dump_dir.empty()) {
    spec.dump = [dir = options.dump_dir, config = spec.layer](
                    RankEnv& env, const std::vector<RankTensor>& tensors) {
      DumpWriter writer(dir, env.group, manifest_header(config));
      for (const RankTensor& t : tensors) writer.add(t.name, t.local, t.placement);
      writer.finish();
    };
  }
  if (!options.load_dir.empty()) {
    auto dump = std::make_shared<const LoadedDump>(load_dump(options.load_dir));
    check_loaded_dump(*dump, options);  // before any rank starts
    spec.load = [dump](const std::string& name, const Tensor& full) {
      dump->copy_into(name, full);
    };
  }
  if (isatty(STDERR_FILENO)) {  // a progress line for a person at a terminal
    spec.on_step = [mode = mode_name(spec.layer.mode), degree = spec.layer.degree,
                    steps = spec.steps](int step, bool checked) {
      std::fprintf(stderr, "\r\x1b[K[shardscope] %s on %d rank(s): step %d/%d%s%s", mode, degree,
                   step + 1, steps, checked ? ", checking against the single-device layer" : "",
                   step + 1 == steps ? "\n" : "");
    };
  }
  return spec;
}

std::unique_ptr<TraceRecorder> make_recorder(const RunOptions& o) {
  if (o.trace_path.empty()) return nullptr;
  const LayerConfig& c = o.spec.layer;
  TraceOptions t;
  t.max_events = o.trace_events;
  t.config = layer_config_json(c);  // what the visualizer needs to replay it
  t.config["steps"] = o.spec.steps;
  t.config["comm"] = comm_kind_name(o.comm);
  t.config["keep_gathered_input"] = o.spec.keep_gathered_input;
  return std::make_unique<TraceRecorder>(std::move(t));
}

// MPI: every process writes its rank's trace next to FILE, and rank 0 merges them into FILE once
// it has printed the tables (write_trace; the ranks need a shared filesystem for that, as for
// --dump and --report).
void write_rank_trace(const TraceRecorder& recorder, const RunOptions& o, RankEnv& env) {
  recorder.write_chrome_trace(rank_trace_path(o.trace_path, env.rank));
  env.group.barrier();
}

// After the tables (they are printed whatever happens to the file): FILE, from the recorder or
// merged from the ranks' files; a failure is one line of result.file_errors.
void write_trace(const TraceRecorder& recorder, const RunOptions& o, RunResult& result) {
  try {
    if (ranks_are_processes(o.comm)) {
      std::vector<std::string> files;
      for (int r = 0; r < o.spec.layer.degree; ++r) {
        files.push_back(rank_trace_path(o.trace_path, r));
      }
      merge_trace_files(files, o.trace_path);
    } else {
      recorder.write_chrome_trace(o.trace_path);
    }
  } catch (const Error& e) {
    result.file_errors.push_back("--trace " + std::string(e.what()));
  }
  note_dropped_events(recorder, o, result);
}

RunResult run_layer(const RunOptions& options, std::ostream& out) {
  options.validate();
  if (options.backend == DeviceKind::cuda && !launched_by_mpirun()) {
    // run_spmd checks too, but names the library's fields; this names the flags that were given.
    const bool nccl = options.comm == CommKind::nccl;
    CudaDeviceCount found;
    if (nccl) {
      found = count_cuda_devices();
    } else {
      found.count = cuda_device_count(&found.why_none);
    }
    const int needed = nccl ? options.spec.layer.degree : 1;
    if (found.count < needed) {
      throw ArgumentError(too_few_devices_message(
          nccl ? "--backend cuda --comm nccl (one thread per device)"
               : "--backend cuda --comm threads (ranks sharing the devices)",
          needed, found));
    }
  }
  check_memory_fits(options, mem_available_bytes());  // exit 2 before a run that cannot fit
  LayerRunSpec spec = spec_with_io(options);
  // Ranks as threads share one single-device reference; each MPI process builds its own.
  if (!ranks_are_processes(options.comm)) spec.reference = std::make_shared<SharedReference>();
  SpmdOptions spmd;
  spmd.comm = options.comm;
  spmd.backend = options.backend;
  spmd.timeout = std::chrono::milliseconds(options.timeout_ms);
  spmd.check_calls = options.check_calls;
  spmd.fault = options.fault;
  std::mutex mutex;
  RunResult result;
  bool have_rank0 = false;
  std::unique_ptr<TraceRecorder> recorder = make_recorder(options);
  run_spmd(options.spec.layer.degree, spmd, [&](RankEnv& env) {
    // The devices are known to be there (run_spmd checked); rank 0 names them before it runs.
    if (env.rank == 0 && options.backend == DeviceKind::cuda) {
      print_cuda_banner(options.comm, options.spec.layer.degree, out);
    }
    RankRun run;
    {
      std::optional<ObserverGuard> attach;  // the whole rank run is traced
      if (recorder) attach.emplace(env.ctx, *recorder);
      run = run_layer_rank(env, spec);
    }
    if (recorder && ranks_are_processes(options.comm)) write_rank_trace(*recorder, options, env);
    if (env.rank != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    result.memory = run.group_memory;
    result.memory[0] = run.memory;
    result.rank0 = std::move(run);
    have_rank0 = true;
  });
  result.printed = have_rank0;
  if (!have_rank0) return result;  // an MPI rank other than 0
  print_tables(options, result, out);
  if (recorder) write_trace(*recorder, options, result);
  return result;
}

void print_tables(const RunOptions& options, RunResult& result, std::ostream& out) {
  print_header(options, out);
  print_steps(result.rank0.steps, log_interval(options.log_every, options.spec.steps), out);
  if (result.rank0.check.ran) print_check_table(result.rank0.check, out);
  if (result.rank0.f32_check.ran) print_f32_check_table(result.rank0.f32_check, out);
  const bool parallel = options.spec.layer.mode != ParallelMode::single;
  const std::vector<CommLine> model =
      parallel ? comm_model(options.spec.layer, options.spec.keep_gathered_input)
               : std::vector<CommLine>{};
  if (parallel) print_comm_table(result.rank0.comm, model, out);
  print_memory_table(result.memory[0], options.spec.layer, out);
  result.model_differences = model_differences(result.memory, result.rank0.comm, model);
  if (result.memory.size() > 1) {
    out << "other ranks (saved / formula / peak bytes):";
    for (std::size_t r = 1; r < result.memory.size(); ++r) {
      out << "  rank " << r << " " << std::fixed << std::setprecision(0)
          << result.memory[r].saved_activation_bytes << " / " << result.memory[r].formula_bytes
          << " / " << result.memory[r].peak_bytes;
    }
    out << "\n";
    out.unsetf(std::ios::floatfield);
  }
  if (options.spec.layer.recompute != Recompute::none) {
    const StepFlops& f = result.rank0.flops;
    char line[240];
    std::snprintf(line, sizeof line,
                  "recomputation (%s): rank 0's matrix products in step 0: forward %.4g GFLOP, run "
                  "again in backward %.4g GFLOP (+%.1f%% of the forward)\n",
                  recompute_name(options.spec.layer.recompute), f.forward / 1e9, f.recomputed / 1e9,
                  f.forward > 0 ? 100.0 * f.recomputed / f.forward : 0.0);
    out << line;
  }
  if (!result.model_differences.empty()) {
    out << "MEASURED DIFFERS FROM THE MODEL:\n";
    for (const std::string& d : result.model_differences) out << "  " << d << "\n";
  }
}

}  // namespace shardscope
