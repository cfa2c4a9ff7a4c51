// The single-device Transformer layer (GPT's by default: f32, dropout 0.1 at its three sites):
//   BM_LayerStep/s/b/h/a/g     forward + backward of loss = sum(y) (parameter gradients
//                              accumulate), the step bench/torch_layer.py times in PyTorch; each
//                              step ends by reading the loss on the host, which waits for the
//                              device, so a step's time is the device's too; the GFLOP/s counter
//                              is the step's matrix products (GemmFlops: forward, and backward
//                              twice that) over its time;
//   BM_LayerGemms/s/b/h/a/g    the same step's matrix products alone (recorded from one step
//                              through Observer::on_gemm, run again with the same descriptors,
//                              backend and threads): BM_LayerStep / BM_LayerGemms is how far the
//                              step is from its GEMM-only bound;
//   BM_LayerTraffic/s/b/h/a/g  the step's other ops (all but its matrix products) as copies of
//                              what each reads and writes (its events' tensors), op after op, with
//                              the backend's copy: what op-by-op execution costs at the machine's
//                              copy speed, so that (gemm-only + this) / gemm-only is the least
//                              step/gemm an unfused step can reach (counters: ops, MB moved);
//   BM_LayerFloor/s/b/h/a/g    the products of BM_LayerGemms with the copies of BM_LayerTraffic
//                              between them, in the step's order, so that each meets the cache
//                              the other left: BM_LayerFloor / BM_LayerGemms is the least
//                              step/gemm a step that runs op by op can reach;
//   BM_ObserverOverhead/s/b/h/a  a training step (forward, backward, SGD) with no observer and
//                              with the TraceRecorder and the MemoryLedger attached, the two
//                              alternating step by step so that drift of the machine's load hits
//                              both. Counters: none_ms and observed_ms (median wall time of each),
//                              ratio (median of the pairs' wall-time ratios) and cpu_ratio (the
//                              same with the process's CPU time, all threads: the work the
//                              observers add, which other programs on the machine inflate less).
//   BM_ObserverHooks/s/b/h/a     one such step's observer calls made again, without the step, on
//                              a new recorder and a new ledger: each one's cost per call
//                              (counters recorder_ns, ledger_ns; calls: a step's).
// Threads: OPENBLAS_NUM_THREADS (GEMMs and the CPU backend's loops). Run:
//   ./build/default/bench/layer_bench [--backend=cpu|cuda] [--model=gpt|llama] [--dtype=D]
//                                     [--dropout=P] [--shape=s,b,h,a[,g] ...] [--benchmark_...]
// --backend=cuda runs BM_LayerStep on cuda:0 (TF32 off unless SHARDSCOPE_TF32=1; exit 2 without a
// device) and leaves BM_ObserverOverhead out; --model (apply_model's presets) and --dtype (f32,
// f64, bf16, f16) and --dropout (the three dropouts' p, default the model's) set BM_LayerStep's
// and BM_LayerGemms' layer; --shape (repeatable) replaces their shapes, g the key/value heads
// (default a).
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <initializer_list>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autograd/backend.h"
#include "autograd/flop_counter.h"
#include "autograd/gemm.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "io/trace_recorder.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {
namespace {

LayerConfig config_of(const benchmark::State& state) {
  LayerConfig c;
  c.seq = state.range(0);
  c.batch = state.range(1);
  c.hidden = state.range(2);
  c.heads = state.range(3);
  c.dropout = 0.1;
  return c;
}

// The layer BM_LayerStep runs: a preset and a dtype.
struct LayerChoice {
  std::string model = "gpt";
  DType dtype = DType::f32;
  std::optional<double> dropout;  // the model's when not given
};

// The layer of BM_LayerStep and BM_LayerGemms for a shape (s, b, h, a, g).
LayerConfig layer_config(const benchmark::State& state, const LayerChoice& choice) {
  LayerConfig c = config_of(state);
  apply_model(choice.model, c);
  c.kv_heads = state.range(4);
  c.dtype = choice.dtype;
  if (choice.dropout) c.dropout = *choice.dropout;
  c.validate();
  return c;
}

void BM_LayerStep(benchmark::State& state, Device device, LayerChoice choice) {
  const LayerConfig c = layer_config(state, choice);
  Context ctx(0, device);
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3, 1.0, c.dtype);
  GemmFlops flops;
  {  // untimed: the first step maps (or caches) its memory, and counts the products
    ObserverGuard count(ctx, flops);
    sum(layer.forward(x)).backward();
  }
  for (auto _ : state) {
    Tensor loss = sum(layer.forward(x));
    loss.backward();
    benchmark::DoNotOptimize(loss.item());  // on the host: waits for the device's work
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(3 * flops.forward(), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

// One step (forward and backward of sum(y)) of a new layer `c` in ctx with `observers` attached:
// what the benchmarks that replay a step's products or traffic record.
void record_step(Context& ctx, const LayerConfig& c, std::initializer_list<Observer*> observers) {
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3, 1.0, c.dtype);
  for (Observer* o : observers) ctx.add_observer(o);
  sum(layer.forward(x)).backward();
  for (Observer* o : observers) ctx.remove_observer(o);
}

// Every GEMM of a step as the backend gets it (Observer::on_gemm).
class GemmLog : public Observer {
 public:
  void on_gemm(const GemmEvent& e) override { calls.emplace_back(*e.desc, e.dtype); }
  std::vector<std::pair<GemmDesc, DType>> calls;
};

// Runs recorded GEMMs again, with their descriptors and dtypes, on buffers as large as the
// largest operand (zeros: a GEMM's time does not depend on its values).
class GemmRunner {
 public:
  GemmRunner(Context& ctx, const std::vector<std::pair<GemmDesc, DType>>& calls, DType dtype)
      : backend_(ctx.backend()), calls_(calls), dtype_(dtype) {
    std::int64_t most[3] = {1, 1, 1};  // elements of the largest A, B and C
    for (const auto& [d, call_dtype] : calls) {
      most[0] = std::max(most[0], d.elements_a());
      most[1] = std::max(most[1], d.elements_b());
      most[2] = std::max(most[2], d.elements_c());
    }
    for (std::int64_t n : most) buffers_.push_back(Tensor::zeros(ctx, Shape{n}, dtype));
  }
  void run(std::size_t i) const {
    const auto& [d, call_dtype] = calls_[i];
    backend_.gemm(d, call_dtype, buffers_[0].raw_data(), buffers_[1].raw_data(),
                  buffers_[2].raw_data());
  }
  // Reads C's first element on the host: waits for the device, no more.
  void wait() const {
    unsigned char first[8];
    backend_.copy_to_host(first, buffers_[2].raw_data(), dtype_size(dtype_));
    benchmark::DoNotOptimize(first);
  }

 private:
  Backend& backend_;
  const std::vector<std::pair<GemmDesc, DType>>& calls_;
  DType dtype_;
  std::vector<Tensor> buffers_;
};

// The step's GEMMs alone: one BM_LayerStep step is recorded (Observer::on_gemm), then each
// iteration runs the same products, with the same descriptors, dtype, backend and threads, one
// after the other on buffers as large as the largest operand (so the step's other work, and its
// moving of data between products, are what is left out). step / this is how far the layer is
// from its GEMM-only bound.
void BM_LayerGemms(benchmark::State& state, Device device, LayerChoice choice) {
  const LayerConfig c = layer_config(state, choice);
  Context ctx(0, device);
  GemmLog log;
  GemmFlops flops;
  record_step(ctx, c, {&log, &flops});
  const GemmRunner gemms(ctx, log.calls, c.dtype);
  for (auto _ : state) {
    for (std::size_t i = 0; i < log.calls.size(); ++i) gemms.run(i);
    gemms.wait();
  }
  state.counters["gemms"] = static_cast<double>(log.calls.size());
  state.counters["GFLOP/s"] =
      benchmark::Counter(3 * flops.forward(), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

// The bytes each op of a step other than its matrix products reads and writes, as its events
// name the tensors: a forward op's inputs and outputs, a backward node's gradients in and out.
// What a backward reads from what its op saved is not named, and views (reshape) move nothing, so
// this is at most what the ops move.
class OpTraffic : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override {
    moving_ = !is_product(e.site.op) && e.site.op != "reshape";
    if (moving_) bytes_ = tensor_bytes(e.input_tensors);
  }
  void on_op_end(const OpEvent& e) override {
    if (!moving_) return;
    moves.push_back(bytes_ + tensor_bytes(e.output_tensors));
    moving_ = false;
  }
  std::vector<std::size_t> moves;  // per op, in order

 private:
  static bool is_product(std::string_view op) {
    return op == "matmul" || op == "causal_matmul" || op == "gather_matmul";
  }
  static std::size_t tensor_bytes(const std::vector<Tensor>* tensors) {
    std::size_t n = 0;
    if (tensors) {
      for (const Tensor& t : *tensors) n += t.defined() ? t.bytes() : 0;
    }
    return n;
  }
  bool moving_ = false;
  std::size_t bytes_ = 0;
};

// Copies, one per recorded op, of half of what the op reads and writes (a copy of n bytes reads n
// and writes n), with the backend's own threaded copy, between buffers of that size (one pair per
// size).
class CopyRunner {
 public:
  CopyRunner(Context& ctx, const std::vector<std::size_t>& moves) : backend_(ctx.backend()) {
    for (std::size_t moved : moves) {
      const std::size_t n = std::max<std::size_t>(moved / 2, 1);
      total_ += static_cast<double>(moved);
      auto it = buffers_.find(n);
      if (it == buffers_.end()) {
        const Shape shape{static_cast<std::int64_t>(n)};
        it = buffers_
                 .emplace(n, std::make_pair(Tensor::zeros(ctx, shape, DType::u8),
                                            Tensor::zeros(ctx, shape, DType::u8)))
                 .first;
      }
      copies_.push_back(&it->second);
    }
  }
  void run(std::size_t i) const { backend_.copy(copies_[i]->first, copies_[i]->second); }
  // Reads the first copy's first byte on the host: waits for the device, no more.
  void wait() const {
    unsigned char first = 0;
    backend_.copy_to_host(&first, copies_.front()->second.raw_data(), 1);
    benchmark::DoNotOptimize(first);
  }
  double total_bytes() const { return total_; }

 private:
  Backend& backend_;
  std::map<std::size_t, std::pair<Tensor, Tensor>> buffers_;  // by copy size
  std::vector<std::pair<Tensor, Tensor>*> copies_;            // one per op, in order
  double total_ = 0;
};

// A step's GEMMs (GemmLog) and other ops' traffic (OpTraffic), and their order: (true, i) for
// gemms.calls[i], (false, i) for traffic.moves[i].
class StepOrder : public Observer {
 public:
  void on_gemm(const GemmEvent& e) override {
    gemms.on_gemm(e);
    steps.emplace_back(true, gemms.calls.size() - 1);
  }
  void on_op_begin(const OpEvent& e) override { traffic.on_op_begin(e); }
  void on_op_end(const OpEvent& e) override {
    const std::size_t before = traffic.moves.size();
    traffic.on_op_end(e);
    if (traffic.moves.size() > before) steps.emplace_back(false, before);
  }
  GemmLog gemms;
  OpTraffic traffic;
  std::vector<std::pair<bool, std::size_t>> steps;
};

// The step's other ops at the speed of a copy: one step's ops are recorded (OpTraffic), then each
// iteration copies, op after op, half of what each op reads and writes (a copy of n bytes reads n
// and writes n) with the backend's own threaded copy, between buffers of that size. Step - gemm-
// only can be no less than this while every op reads its inputs from memory and writes its
// outputs there, which is what running op by op does.
void BM_LayerTraffic(benchmark::State& state, Device device, LayerChoice choice) {
  const LayerConfig c = layer_config(state, choice);
  Context ctx(0, device);
  OpTraffic traffic;
  record_step(ctx, c, {&traffic});
  const CopyRunner copies(ctx, traffic.moves);
  for (auto _ : state) {
    for (std::size_t i = 0; i < traffic.moves.size(); ++i) copies.run(i);
    copies.wait();
  }
  state.counters["ops"] = static_cast<double>(traffic.moves.size());
  state.counters["MB"] = copies.total_bytes() / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The step's GEMMs and, between them, its other ops as copies (BM_LayerTraffic's), in the
// step's order: each product meets the cache the copies left and each copy the cache the products
// left, which BM_LayerGemms and BM_LayerTraffic, each run apart, leave out. this / gemm-only is the
// least step/gemm a step that runs op by op can reach.
void BM_LayerFloor(benchmark::State& state, Device device, LayerChoice choice) {
  const LayerConfig c = layer_config(state, choice);
  Context ctx(0, device);
  StepOrder order;
  record_step(ctx, c, {&order});
  const GemmRunner gemms(ctx, order.gemms.calls, c.dtype);
  const CopyRunner copies(ctx, order.traffic.moves);
  for (auto _ : state) {
    for (const auto& [is_gemm, i] : order.steps) {
      if (is_gemm) {
        gemms.run(i);
      } else {
        copies.run(i);
      }
    }
    gemms.wait();
  }
  state.counters["gemms"] = static_cast<double>(order.gemms.calls.size());
  state.counters["ops"] = static_cast<double>(order.traffic.moves.size());
}

// CPU time of the whole process (every thread), in ms.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

struct StepTime {
  double wall_ms = 0, cpu_ms = 0;
};

// The layer the observer benchmarks train: forward, backward of sum(y), SGD.
struct TrainedLayer {
  explicit TrainedLayer(const LayerConfig& c)
      : layer(c, make_layer_weights(ctx, c)),
        params(layer.parameters()),
        x(Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3)) {}
  void step(std::int64_t n) {
    ctx.set_step(n);
    {
      Tensor loss = sum(layer.forward(x));
      loss.backward();
    }
    sgd_step(params, 1e-3);
  }
  Context ctx;
  TransformerLayer layer;
  std::vector<Tensor> params;
  Tensor x;
};

void BM_ObserverOverhead(benchmark::State& state) {
  TrainedLayer trained(config_of(state));
  Context& ctx = trained.ctx;
  TraceRecorder recorder;
  MemoryLedger ledger;
  std::int64_t step = 0;
  auto train_step = [&] {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_ms();
    trained.step(step++);
    const auto wall = std::chrono::steady_clock::now() - start;
    return StepTime{std::chrono::duration<double, std::milli>(wall).count(),
                    process_cpu_ms() - cpu_start};
  };
  train_step();  // untimed: the first step maps its memory
  std::vector<double> bare, observed, wall_ratio, cpu_ratio;
  for (auto _ : state) {
    const StepTime none = train_step();
    ctx.add_observer(&ledger);
    ctx.add_observer(&recorder);
    const StepTime with = train_step();
    ctx.remove_observer(&recorder);
    ctx.remove_observer(&ledger);
    bare.push_back(none.wall_ms);
    observed.push_back(with.wall_ms);
    wall_ratio.push_back(with.wall_ms / none.wall_ms);
    cpu_ratio.push_back(with.cpu_ms / none.cpu_ms);
  }
  state.counters["none_ms"] = median(bare);
  state.counters["observed_ms"] = median(observed);
  state.counters["ratio"] = median(wall_ratio);
  state.counters["cpu_ratio"] = median(cpu_ratio);
  state.counters["events"] = static_cast<double>(recorder.events().size());
}

// One step's observer calls, kept (with their own copies of the texts and shapes the events point
// to) so that they can be made again: BM_ObserverHooks.
class HookLog final : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override { keep_op(add(Kind::op_begin, e.site), e); }
  void on_op_end(const OpEvent& e) override { keep_op(add(Kind::op_end, e.site), e); }
  void on_alloc(const StorageEvent& e) override { add(Kind::alloc, e.site).storage = e; }
  void on_free(const StorageEvent& e) override { add(Kind::free, e.site).storage = e; }
  void on_recategorize(const StorageEvent& e) override {
    add(Kind::recategorize, e.site).storage = e;
  }
  void on_save(const SaveEvent& e) override { add(Kind::save, e.site).save = e; }
  void on_release(const SaveEvent& e) override { add(Kind::release, e.site).save = e; }

  std::size_t size() const { return calls_.size(); }
  // Makes the calls again on `o`, as step `step`.
  void replay(Observer& o, std::int64_t step) const {
    for (const Call& c : calls_) {
      Site site = c.site;
      site.op = c.op_text;
      site.scope = c.scope_text;
      site.step = step;
      if (c.kind == Kind::op_begin || c.kind == Kind::op_end) {
        OpEvent op = c.op;
        op.site = site;
        op.placement = c.placement;
        op.inputs = c.has_inputs ? &c.inputs : nullptr;
        op.outputs = c.has_outputs ? &c.outputs : nullptr;
        c.kind == Kind::op_begin ? o.on_op_begin(op) : o.on_op_end(op);
      } else if (c.kind == Kind::save || c.kind == Kind::release) {
        SaveEvent save = c.save;
        save.site = site;
        c.kind == Kind::save ? o.on_save(save) : o.on_release(save);
      } else {
        StorageEvent storage = c.storage;
        storage.site = site;
        if (c.kind == Kind::alloc) o.on_alloc(storage);
        if (c.kind == Kind::free) o.on_free(storage);
        if (c.kind == Kind::recategorize) o.on_recategorize(storage);
      }
    }
  }

 private:
  enum class Kind { op_begin, op_end, alloc, free, recategorize, save, release };
  struct Call {
    Kind kind = Kind::op_begin;
    Site site;
    std::string op_text, scope_text, placement;
    OpEvent op;
    StorageEvent storage;
    SaveEvent save;
    std::vector<Shape> inputs, outputs;
    bool has_inputs = false, has_outputs = false;
  };
  Call& add(Kind kind, const Site& site) {
    Call& c = calls_.emplace_back();
    c.kind = kind;
    c.site = site;
    c.op_text = std::string(site.op);
    c.scope_text = std::string(site.scope);
    return c;
  }
  static void keep_op(Call& c, const OpEvent& e) {
    c.placement = std::string(e.placement);
    c.has_inputs = e.inputs != nullptr;
    c.has_outputs = e.outputs != nullptr;
    if (e.inputs) c.inputs = *e.inputs;
    if (e.outputs) c.outputs = *e.outputs;
    c.op = e;
    c.op.input_tensors = c.op.output_tensors = nullptr;  // valid only during the call
  }
  std::deque<Call> calls_;
};

// BM_ObserverHooks/s/b/h/a: one training step's observer calls, recorded once, made again for 1000
// steps on a new TraceRecorder and a new MemoryLedger each iteration: what each observer costs a
// call away from the step's own work (warm caches, but fresh memory for the recorder's events:
// it is made anew). Counters: calls (a step's), recorder_ns and ledger_ns (per call).
void BM_ObserverHooks(benchmark::State& state) {
  TrainedLayer trained(config_of(state));
  HookLog log;
  trained.step(0);  // the first step maps its memory
  trained.ctx.add_observer(&log);
  trained.step(1);
  trained.ctx.remove_observer(&log);
  constexpr int kSteps = 1000;
  double recorder_ns = 0, ledger_ns = 0;
  auto timed = [](Observer& o, const HookLog& calls) {
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < kSteps; ++step) calls.replay(o, step);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
        .count();
  };
  for (auto _ : state) {
    TraceRecorder recorder;
    MemoryLedger ledger;
    recorder_ns += timed(recorder, log);
    ledger_ns += timed(ledger, log);
  }
  const double calls =
      static_cast<double>(state.iterations()) * kSteps * static_cast<double>(log.size());
  state.counters["calls"] = static_cast<double>(log.size());
  state.counters["recorder_ns"] = recorder_ns / calls;
  state.counters["ledger_ns"] = ledger_ns / calls;
}

// Our flags, taken out of argv before Google Benchmark reads the rest.
struct BenchFlags {
  Device device = Device::cpu();
  LayerChoice layer;
  std::vector<std::vector<std::int64_t>> shapes;  // s, b, h, a, g; empty: the default shapes
};

std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::istringstream in(text);
  std::string part;
  bool valid = true;
  while (std::getline(in, part, ',')) {
    char* end = nullptr;
    const long long value = std::strtoll(part.c_str(), &end, 10);
    valid = valid && !part.empty() && *end == '\0' && value >= 1;
    dims.push_back(value);
  }
  if (!valid || (dims.size() != 4 && dims.size() != 5)) {
    throw std::invalid_argument("--shape=" + text +
                                ": expected s,b,h,a or s,b,h,a,g (integers >= 1)");
  }
  if (dims.size() == 4) dims.push_back(dims[3]);  // g = a: multi-head attention
  return dims;
}

BenchFlags take_flags(int& argc, char** argv) {
  BenchFlags flags;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--backend=", 0) == 0) {
      const std::string name = arg.substr(10);
      if (name != "cpu" && name != "cuda") {
        throw std::invalid_argument(arg + ": expected --backend=cpu or --backend=cuda");
      }
      flags.device = name == "cuda" ? Device::cuda(0) : Device::cpu();
    } else if (arg.rfind("--model=", 0) == 0) {
      flags.layer.model = arg.substr(8);
      LayerConfig probe;
      apply_model(flags.layer.model, probe);  // ConfigError naming the presets
    } else if (arg.rfind("--dtype=", 0) == 0) {
      const std::optional<DType> dtype = dtype_from_name(arg.substr(8));
      if (!dtype || !is_floating(*dtype)) {
        throw std::invalid_argument(arg + ": expected f32, f64, bf16 or f16");
      }
      flags.layer.dtype = *dtype;
    } else if (arg.rfind("--dropout=", 0) == 0) {
      char* end = nullptr;
      const double p = std::strtod(arg.c_str() + 10, &end);
      if (arg.size() == 10 || *end != '\0' || !(p >= 0.0 && p < 1.0)) {
        throw std::invalid_argument(arg + ": expected a probability in [0, 1)");
      }
      flags.layer.dropout = p;
    } else if (arg.rfind("--shape=", 0) == 0) {
      flags.shapes.push_back(parse_shape(arg.substr(8)));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return flags;
}

void register_benchmarks(const BenchFlags& flags) {
  std::vector<std::vector<std::int64_t>> shapes = flags.shapes;
  if (shapes.empty()) shapes = {{128, 4, 256, 8, 8}, {256, 4, 512, 8, 8}, {512, 4, 1024, 16, 16}};
  using LayerBenchmark = void (*)(benchmark::State&, Device, LayerChoice);
  const std::pair<const char*, LayerBenchmark> layer_benchmarks[] = {
      {"BM_LayerStep", BM_LayerStep},
      {"BM_LayerGemms", BM_LayerGemms},
      {"BM_LayerTraffic", BM_LayerTraffic},
      {"BM_LayerFloor", BM_LayerFloor}};
  for (const auto& [name, run] : layer_benchmarks) {
    auto* b = benchmark::RegisterBenchmark(name, run, flags.device, flags.layer);
    for (const auto& shape : shapes) b->Args(shape);
    b->ArgNames({"s", "b", "h", "a", "g"})->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  if (flags.device.kind != DeviceKind::cpu) return;
  // Not the largest shape: its 267 events a step cost about 0.2 ms of a 2 s step, far below the
  // step-to-step spread of two steps in a row on a shared machine.
  benchmark::RegisterBenchmark("BM_ObserverOverhead", BM_ObserverOverhead)
      ->Args({64, 2, 128, 4})
      ->Args({128, 4, 256, 8})
      ->Args({256, 4, 512, 8})
      ->ArgNames({"s", "b", "h", "a"})
      ->MinTime(5.0)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_ObserverHooks", BM_ObserverHooks)
      ->Args({64, 2, 128, 4})
      ->ArgNames({"s", "b", "h", "a"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace
}  // namespace shardscope

int main(int argc, char** argv) {
  using namespace shardscope;
  BenchFlags flags;
  try {
    flags = take_flags(argc, argv);
    Context probe(0, flags.device);  // no device: one line and exit 2, before any benchmark
  } catch (const std::exception& e) {
    std::cerr << "layer_bench: " << e.what() << "\n";
    return 2;
  }
  register_benchmarks(flags);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
