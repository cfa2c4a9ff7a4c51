// The flags of `shardscope run`.
#include "apps/run_flags.h"

#include <algorithm>
#include <iterator>

#include "autograd/cuda/cuda_backend.h"
#include "autograd/errors.h"

namespace shardscope {

void RunFlags::add_to(CLI::App& run, bool outputs) {
  RunOptions& o = options;
  RunFlags& text = *this;
  LayerConfig& c = o.spec.layer;
  run.add_option("--mode", text.mode, "single, tp, tp-sp or ulysses")->capture_default_str();
  run.add_option(
      "--comm", text.comm,
      "threads (ranks are threads, the default; with --backend cuda they share the "
      "GPUs and their collectives are staged through host memory), mpi (ranks are "
      "processes, under mpirun; cpu or reference) or nccl (ranks own CUDA devices: a thread per "
      "device, or a process per device under mpirun)");
  run.add_option("--backend", text.backend,
                 "cpu (the default), cuda (implies --comm nccl when there is a GPU per rank or "
                 "under mpirun, else --comm threads) or reference (plain single-threaded loops, "
                 "autograd/reference/: slow, an independent check of the others; --comm threads "
                 "or mpi)");
  run.add_flag("--no-call-check", text.no_call_check,
               "nccl: skip the host-side exchange before every NCCL call that checks every rank "
               "issues the same collective");
  run.add_flag("--no-check", text.no_check, "skip the comparison with the single-device layer");
  run.add_option("--check-steps", text.check_steps,
                 "compare only the first N steps with the single-device layer (default: every "
                 "step; each checked step costs one single-device step)");
  run.add_flag("--check-finite", o.spec.check_finite,
               "check every op's outputs and every gradient for NaN and Inf; the first one ends "
               "the run with an error naming the op, layer, phase, step and rank");
  run.add_flag("--keep-gathered-input", o.spec.keep_gathered_input,
               "tp-sp: keep the all-gathered linear inputs for backward instead of re-gathering");
  run.add_option_function<std::string>(
      "--inject-fault", [&text](const std::string& value) { text.inject_fault = value; },
      "rank=R,at=OP[,kind=throw|wrong-size|skip-collective|hang]: rank R misbehaves at its "
      "first collective or op named OP (a collective kind such as all_gather, or an op name "
      "such as gather_matmul or matmul), to see how the run fails (docs/user-guide.md)");
  run.add_option("--timeout-ms", o.timeout_ms,
                 "threads, and nccl without mpirun: how long a collective waits for a rank")
      ->capture_default_str();
  run.add_option("--degree", c.degree, "ranks in the tensor-parallel group (t)")
      ->capture_default_str();
  run.add_option("--seq", c.seq, "sequence length s")->capture_default_str();
  run.add_option("--batch", c.batch, "micro-batch size b")->capture_default_str();
  run.add_option("--hidden", c.hidden, "hidden size h")->capture_default_str();
  run.add_option("--heads", c.heads, "attention heads a (h must divide by a)")
      ->capture_default_str();
  run.add_option("--layers", c.layers,
                 "L: a stack of L layers of this kind, each with its own weights, every one "
                 "checked and measured")
      ->capture_default_str();
  run.add_option("--kv-heads", c.kv_heads,
                 "key/value heads g (grouped-query attention; 1: multi-query; default a)");
  run.add_option("--model", text.model,
                 "the layer's kind: gpt (LayerNorm, GeLU, f = 4h, biases, dropout 0.1) or llama "
                 "(RMSNorm, SwiGLU, f = 8h/3 rounded up to a multiple of 48, no biases, rotary "
                 "embedding, dropout 0); the flags below override it")
      ->capture_default_str();
  run.add_option("--dropout", text.dropout,
                 "dropout probability of the three dropouts (default: the model's, 0.1 for gpt)");
  run.add_option("--norm", text.norm, "the norms: layernorm or rmsnorm (default: the model's)");
  run.add_option("--mlp", text.mlp,
                 "the MLP: gelu (fc1 h -> f, GeLU, fc2) or swiglu (fc1 h -> 2f, silu(gate) * up, "
                 "fc2) (default: the model's)");
  run.add_option("--ffn", c.ffn, "the MLP's inner width f (default: the model's)");
  run.add_flag("--no-bias", text.no_bias, "linears without biases (as Llama's)");
  run.add_flag("--rope", c.rope,
               "rotary position embedding of the queries and keys (rotate-half, as Llama's)");
  run.add_option("--rope-base", c.rope_base, "the rotary embedding's base (theta)")
      ->capture_default_str();
  run.add_option("--recompute", text.recompute,
                 "activation recomputation: none, selective (the attention core recomputed in "
                 "backward from Q, K and V) or full (the layer recomputed from its input)")
      ->capture_default_str();
  run.add_option("--steps", o.spec.steps, "SGD steps")->capture_default_str();
  run.add_option("--lr", o.spec.learning_rate, "SGD learning rate")->capture_default_str();
  run.add_option("--seed", c.seed, "seed of weights, data and dropout masks")
      ->capture_default_str()
      ->check(CLI::Validator(  // CLI11 would wrap -1 around to 2^64 - 1
          [](const std::string& v) {
            return v.find('-') == std::string::npos ? "" : "must be an integer >= 0, given " + v;
          },
          "SEED >= 0"));
  run.add_option("--dtype", text.dtype,
                 "f32, f64, bf16 or f16 (2-byte storage, computed and summed in f32; cpu and "
                 "reference backends, --comm threads)")
      ->capture_default_str();
  run.add_flag(
      "--random-norms", c.random_norms,
      "start the norms at weight 1 + N(0, 0.1) (LayerNorm's bias at N(0, 0.1)) instead of 1 "
      "and 0, so a mistake in their scale or shift shows in the output");
  run.add_option("--plant-bug", text.plant_bug,
                 "plant one known bug of the catalogue (docs/bug-catalogue.md) into the parallel "
                 "layer, to see the check catch it: " +
                     planted_bug_names() +
                     "; or random: one that applies to the run, chosen from --seed and --mode "
                     "and never named by the run (lab 8, labs/08-find-the-bug/)")
      ->capture_default_str();
  if (!outputs) return;
  run.add_option("--log-every", o.log_every,
                 "print the step table's loss every N steps (and the last step); default: every "
                 "step up to 50 steps, else every ceil(steps/20) steps (about 20 lines)");
  run.add_option("--report", o.report_path, "write a JSON report to this file");
  run.add_option("--dump", o.dump_dir,
                 "write every tensor of step 0 (full and per-rank .npy, manifest.json) into this "
                 "new or empty folder (whole or not at all)");
  run.add_flag("--overwrite", o.overwrite, "let --dump replace a dump already in its folder");
  run.add_option("--load", o.load_dir, "start from this dump's weights, input and target");
  run.add_option("--trace", o.trace_path,
                 "write a Chrome trace (Perfetto, chrome://tracing) of the run to this file");
  run.add_option("--trace-events", o.trace_events,
                 "the most events --trace keeps (100 to 300 bytes each in memory); later ones are "
                 "dropped, counted in the file and named on stderr")
      ->capture_default_str();
}

DType parse_dtype(const std::string& name) {
  const std::optional<DType> d = dtype_from_name(name);
  if (d && is_floating(*d)) return *d;
  throw ArgumentError("--dtype " + name + " is not supported: expected f32, f64, bf16 or f16");
}

CommKind default_cuda_comm(int degree, int devices, bool nccl_built, bool under_mpirun) {
  if (under_mpirun) return CommKind::nccl;
  return nccl_built && devices >= degree ? CommKind::nccl : CommKind::threads;
}

void resolve_comm_and_backend(const std::string& comm, const std::string& backend, RunOptions& o) {
  const bool comm_given = !comm.empty(), backend_given = !backend.empty();
  o.backend = backend_given ? parse_backend(backend) : DeviceKind::cpu;
  o.comm = comm_given ? parse_comm_kind(comm) : CommKind::threads;
  if (!backend_given && o.comm == CommKind::nccl) o.backend = DeviceKind::cuda;
  if (!comm_given && o.backend == DeviceKind::cuda) {
    const bool under_mpirun = launched_by_mpirun();
    o.comm = default_cuda_comm(o.spec.layer.degree, under_mpirun ? 0 : cuda_device_count(),
                               nccl_available(), under_mpirun);
  }
}

bool RunFlags::is_run_flag(const std::string& name) {
  static const char* const kNames[] = {"--mode",         "--comm",          "--backend",
                                       "--no-check",     "--no-call-check", "--keep-gathered-input",
                                       "--timeout-ms",   "--degree",        "--seq",
                                       "--batch",        "--hidden",        "--heads",
                                       "--dropout",      "--steps",         "--lr",
                                       "--seed",         "--dtype",         "--report",
                                       "--dump",         "--load",          "--check-finite",
                                       "--random-norms", "--check-steps",   "--plant-bug",
                                       "--log-every",    "--overwrite",     "--trace-events",
                                       "--norm",         "--mlp",           "--ffn",
                                       "--no-bias",      "--rope",          "--rope-base",
                                       "--kv-heads",     "--model",         "--layers",
                                       "--recompute"};
  if (name == "--inject-fault") return true;
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

std::string with_flags(const ArgumentError& error) {
  const auto* config = dynamic_cast<const ConfigError*>(&error);
  if (!config) return error.what();
  const ConfigError& e = *config;
  // The flags of shardscope run, debug, mlp-ln and shardscope-viz that set each field.
  static const std::pair<const char*, const char*> kFlags[] = {{"mode", "--mode"},
                                                               {"degree", "--degree"},
                                                               {"seq", "--seq"},
                                                               {"batch", "--batch"},
                                                               {"hidden", "--hidden"},
                                                               {"heads", "--heads"},
                                                               {"ffn", "--ffn"},
                                                               {"dropout", "--dropout"},
                                                               {"dtype", "--dtype"},
                                                               {"seed", "--seed"},
                                                               {"planted_bug", "--plant-bug"},
                                                               {"comm", "--comm"},
                                                               {"world", "--degree"},
                                                               {"fault", "--inject-fault"},
                                                               {"check_calls", "--no-call-check"},
                                                               {"norm", "--norm"},
                                                               {"mlp", "--mlp"},
                                                               {"bias", "--no-bias"},
                                                               {"rope", "--rope"},
                                                               {"rope_base", "--rope-base"},
                                                               {"kv_heads", "--kv-heads"},
                                                               {"model", "--model"},
                                                               {"layers", "--layers"},
                                                               {"recompute", "--recompute"}};
  std::vector<std::string> flags;
  for (const std::string& field : e.fields()) {
    for (const auto& [name, flag] : kFlags) {
      if (field == name) flags.emplace_back(flag);
    }
  }
  std::string out = e.what();
  for (std::size_t i = 0; i < flags.size(); ++i) {
    out += i == 0 ? " (set by " : i + 1 == flags.size() ? " and " : ", ";
    out += flags[i];
  }
  return flags.empty() ? out : out + ")";
}

RunOptions RunFlags::resolve(bool timeout_set) const {
  RunOptions o = options;
  o.spec.layer.mode = parse_mode(mode);
  o.spec.layer.dtype = parse_dtype(dtype);
  LayerConfig& c = o.spec.layer;
  const std::int64_t ffn = c.ffn;
  const bool rope = c.rope;
  apply_model(model, c);  // then what the flags give
  if (!norm.empty()) c.norm = parse_norm(norm);
  if (!mlp.empty()) c.mlp = parse_mlp(mlp);
  if (ffn > 0) c.ffn = ffn;
  if (no_bias) c.bias = false;
  if (rope) c.rope = true;
  if (dropout) c.dropout = *dropout;
  c.recompute = parse_recompute(recompute);
  try {
    // random: the run's own seed picks the bug, so `--seed N` names the exercise (lab 8).
    o.spec.layer.planted_bug = plant_bug == kRandomBug
                                   ? choose_random_bug(o.spec.layer.seed, o.spec.layer)
                                   : parse_planted_bug(plant_bug);
  } catch (const ArgumentError& e) {
    const bool unknown = plant_bug != kRandomBug && plant_bug != "none";
    throw ArgumentError(std::string("--plant-bug: ") + e.what() + (unknown ? ", or random" : ""));
  }
  resolve_comm_and_backend(comm, backend, o);
  o.spec.check = !no_check;
  if (check_steps) {
    if (*check_steps < 1) {
      throw ArgumentError("--check-steps must be at least 1, given " +
                          std::to_string(*check_steps) + " (--no-check skips the check)");
    }
    if (no_check) throw ArgumentError("--check-steps and --no-check contradict each other");
    o.spec.check_steps = *check_steps;
  }
  o.check_calls = !no_call_check;
  if (inject_fault) o.fault = parse_fault_plan(*inject_fault);
  if (no_call_check && o.comm != CommKind::nccl) {
    throw ArgumentError("--no-call-check applies to --comm nccl (threads and mpi always check)");
  }
  if (timeout_set &&
      (o.comm == CommKind::mpi || (o.comm == CommKind::nccl && launched_by_mpirun()))) {
    throw ArgumentError(
        "--timeout-ms applies to --comm threads and nccl without mpirun; under mpi "
        "use mpirun --timeout");
  }
  o.validate();
  return o;
}

}  // namespace shardscope
