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
//   BM_LayerPaired/s/b/h/a/g   the step and the three above in turn, each iteration, so that the
//                              ratios come from times taken moments apart (on a machine shared
//                              with other work, the benchmarks above, run one after another, saw
//                              the same GEMMs take 22 and 28 ms): counters step_ms, gemm_ms,
//                              traffic_ms, floor_ms, products_ms (the timed step's products,
//                              timed inside it by their ops' begins and ends; medians over the
//                              iterations) and step_over_gemm, in_step (products_ms / gemm),
//                              apart ((gemm + traffic) / gemm), floor_over_gemm (medians of each
//                              iteration's own ratios); then in the step's own memory (each
//                              address the step's products and other ops reached at its offset
//                              in a buffer of its region: StepMemory) the GEMMs alone, the floor,
//                              and the floor with the other ops' copies there too, each reading
//                              what its op read and writing what it wrote, where the step had
//                              them (OpCopyRunner): own_ms, own_over_gemm, own_floor_over_gemm,
//                              mem_floor_ms and mem_floor_over_gemm, with the bytes each replay
//                              runs on or moves (gemm_MB, own_MB; traffic_MB, mem_MB), so that
//                              what the step loses to its footprint (the activations backward
//                              keeps, beyond the caches) is told from the rest;
//                              bench/layer_vs_torch.sh reports these;
//   BM_LayerKernel/NAME/s/b/h/a/g  one of the layer's element and row kernels (its norm, softmax,
//                              dropouts, MLP activation, the heads' split and merge; a copy for
//                              the machine's rate) called back to back on tensors of its own,
//                              in cache: its time alone, the bytes it takes (MB) and their rate
//                              (bytes_per_second);
// Threads: OPENBLAS_NUM_THREADS (GEMMs and the CPU backend's loops). Run:
//   ./build/default/bench/layer_bench [--backend=cpu|cuda] [--model=gpt|llama] [--dtype=D]
//                                     [--dropout=P] [--shape=s,b,h,a[,g] ...] [--benchmark_...]
// --backend=cuda runs them on cuda:0 (TF32 off unless SHARDSCOPE_TF32=1; exit 2 without a
// device); --model (apply_model's presets), --dtype (f32, f64, bf16, f16) and --dropout (the three
// dropouts' p, default the model's) set their layer; --shape (repeatable) replaces their shapes, g
// the key/value heads (default a). The observers' cost is bench/observer_bench.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
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
#include "autograd/ops.h"
#include "bench/layer_args.h"
#include "bench/layer_kernels.h"
#include "bench/operand_regions.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {
namespace {

// The layer BM_LayerStep runs: a preset and a dtype.
struct LayerChoice {
  std::string model = "gpt";
  DType dtype = DType::f32;
  std::optional<double> dropout;  // the model's when not given
};

// The layer of BM_LayerStep and BM_LayerGemms for a shape (s, b, h, a, g).
LayerConfig layer_config(const benchmark::State& state, const LayerChoice& choice) {
  LayerConfig c = layer_of_args(state);
  apply_model(choice.model, c);
  c.kv_heads = state.range(4);
  c.dtype = choice.dtype;
  if (choice.dropout) c.dropout = *choice.dropout;
  c.validate();
  return c;
}

// A layer on a device and its input, stepped: forward and backward of sum(y) (parameter
// gradients accumulate), what BM_LayerStep and BM_LayerPaired time.
struct SteppedLayer {
  SteppedLayer(const LayerConfig& c, Device device)
      : ctx(0, device),
        layer(c, make_layer_weights(ctx, c)),
        x(Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3, 1.0, c.dtype)) {}
  void step() {
    Tensor loss = sum(layer.forward(x));
    loss.backward();
    benchmark::DoNotOptimize(loss.item());  // on the host: waits for the device's work
  }
  // An untimed step with `observer` attached: the first maps (or caches) the step's memory.
  void step_watched(Observer& observer) {
    const ObserverGuard watch(ctx, observer);
    step();
  }
  Context ctx;
  TransformerLayer layer;
  Tensor x;
};

void BM_LayerStep(benchmark::State& state, Device device, LayerChoice choice) {
  SteppedLayer stepped(layer_config(state, choice), device);
  GemmFlops flops;
  stepped.step_watched(flops);
  for (auto _ : state) stepped.step();
  state.counters["GFLOP/s"] =
      benchmark::Counter(3 * flops.forward(), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

// One step (forward and backward of sum(y)) of a new layer `c` in ctx with `observers` attached:
// what the benchmarks that replay a step's products or traffic record. It is the layer's second
// step, as the timed steps are: its weights' gradients accumulate into the first's (their products
// add into them, ops_detail::accumulation_target).
void record_step(Context& ctx, const LayerConfig& c, std::initializer_list<Observer*> observers) {
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3, 1.0, c.dtype);
  sum(layer.forward(x)).backward();
  for (Observer* o : observers) ctx.add_observer(o);
  sum(layer.forward(x)).backward();
  for (Observer* o : observers) ctx.remove_observer(o);
}

// One GEMM of a step as the backend got it (Observer::on_gemm): its descriptor, dtype, and
// where its A, B and C were.
struct GemmCall {
  GemmDesc desc;
  DType dtype = DType::f32;
  std::array<std::uintptr_t, 3> at{};
  // Bytes from A's, B's and C's start that the call reaches.
  std::array<std::uintptr_t, 3> bytes() const {
    const auto size = static_cast<std::int64_t>(dtype_size(dtype));
    return {static_cast<std::uintptr_t>(desc.elements_a() * size),
            static_cast<std::uintptr_t>(desc.elements_b() * size),
            static_cast<std::uintptr_t>(desc.elements_c() * size)};
  }
};

// Every GEMM of a step as the backend gets it.
class GemmLog : public Observer {
 public:
  void on_gemm(const GemmEvent& e) override {
    calls.push_back({*e.desc,
                     e.dtype,
                     {reinterpret_cast<std::uintptr_t>(e.a), reinterpret_cast<std::uintptr_t>(e.b),
                      reinterpret_cast<std::uintptr_t>(e.c)}});
  }
  std::vector<GemmCall> calls;
};

// The step's own memory: one buffer per region of the addresses its products and its other ops
// reached (OperandRegions), each as large as its region, zeroed, so that a replay at an address's
// offset in its region's buffer meets what the step met there: as many bytes, shared where the
// step's were, and each at the step's offset within a 4 KiB page (so in the same cache sets and
// cache lines). (A GEMM's and a copy's time do not depend on the values, which stay zero.)
class StepMemory {
 public:
  static constexpr std::size_t kPage = 4096;
  StepMemory(Context& ctx, const std::vector<bench::AddressSpan>& spans) : regions_(spans) {
    for (std::size_t r = 0; r < regions_.count(); ++r) {
      Tensor buffer = Tensor::zeros(
          ctx, Shape{static_cast<std::int64_t>(regions_.bytes(r) + kPage)}, DType::u8);
      const auto from = reinterpret_cast<std::uintptr_t>(buffer.raw_data());
      const std::uintptr_t step_start = regions_.start(r);
      starts_.push_back(static_cast<std::int64_t>((step_start - from) % kPage));
      buffers_.push_back(std::move(buffer));
    }
  }
  // The region buffer that holds the step's `address`, and the address's offset there.
  std::pair<Tensor*, std::int64_t> locate(std::uintptr_t address) {
    const auto [region, offset] = regions_.locate(address);
    return {&buffers_[region], starts_[region] + static_cast<std::int64_t>(offset)};
  }
  void* at(std::uintptr_t address) {
    const auto [buffer, offset] = locate(address);
    return static_cast<unsigned char*>(buffer->raw_data()) + offset;
  }
  std::size_t bytes() const { return regions_.total_bytes(); }

 private:
  bench::OperandRegions regions_;
  std::vector<Tensor> buffers_;       // one per region, u8, a page longer than it
  std::vector<std::int64_t> starts_;  // where each region starts in its buffer
};

// Runs recorded GEMMs again, with their descriptors and dtypes, on zeros (a GEMM's time does not
// depend on its values): on one buffer per operand (A, B, C) as large as the largest, shared by
// every call (each product's operands in the cache the last one left: the GEMM-only bound); or
// in the step's own memory, each call's operands at their offsets in its regions.
class GemmRunner {
 public:
  GemmRunner(Context& ctx, const std::vector<GemmCall>& calls, DType dtype)
      : backend_(ctx.backend()), calls_(calls), dtype_(dtype) {
    std::int64_t most[3] = {1, 1, 1};  // elements of the largest A, B and C
    for (const GemmCall& call : calls) {
      most[0] = std::max(most[0], call.desc.elements_a());
      most[1] = std::max(most[1], call.desc.elements_b());
      most[2] = std::max(most[2], call.desc.elements_c());
    }
    for (std::int64_t n : most) {
      buffers_.push_back(Tensor::zeros(ctx, Shape{n}, dtype));
      bytes_ += static_cast<std::size_t>(n) * dtype_size(dtype);
    }
    operands_.assign(calls.size(),
                     {buffers_[0].raw_data(), buffers_[1].raw_data(), buffers_[2].raw_data()});
  }
  GemmRunner(Context& ctx, const std::vector<GemmCall>& calls, DType dtype, StepMemory& memory)
      : backend_(ctx.backend()), calls_(calls), dtype_(dtype), bytes_(memory.bytes()) {
    for (const GemmCall& call : calls) {
      operands_.push_back({memory.at(call.at[0]), memory.at(call.at[1]), memory.at(call.at[2])});
    }
  }
  // The bytes of the memory the products run on.
  std::size_t bytes() const { return bytes_; }
  void run(std::size_t i) const {
    const GemmCall& call = calls_[i];
    backend_.gemm(call.desc, call.dtype, operands_[i][0], operands_[i][1], operands_[i][2]);
  }
  // Every recorded product in order, then wait().
  void run_all() const {
    for (std::size_t i = 0; i < calls_.size(); ++i) run(i);
    wait();
  }
  // Reads the last C's first element on the host: waits for the device, no more.
  void wait() const {
    unsigned char first[8];
    if (operands_.empty()) return;
    backend_.copy_to_host(first, operands_.back()[2], dtype_size(dtype_));
    benchmark::DoNotOptimize(first);
  }

 private:
  Backend& backend_;
  const std::vector<GemmCall>& calls_;
  DType dtype_;
  std::vector<Tensor> buffers_;                 // shared: A, B and C
  std::vector<std::array<void*, 3>> operands_;  // each call's A, B and C
  std::size_t bytes_ = 0;                       // of the memory they run on
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
  for (auto _ : state) gemms.run_all();
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
  static bool is_product(std::string_view op) {
    return op == "matmul" || op == "causal_matmul" || op == "gather_matmul";
  }
  // The ops whose bytes the models move: all but the products and the views.
  static bool moves_bytes(std::string_view op) { return !is_product(op) && op != "reshape"; }
  void on_op_begin(const OpEvent& e) override {
    moving_ = moves_bytes(e.site.op);
    if (moving_) bytes_ = tensor_bytes(e.input_tensors);
  }
  void on_op_end(const OpEvent& e) override {
    if (!moving_) return;
    moves.push_back(bytes_ + tensor_bytes(e.output_tensors));
    moving_ = false;
  }
  std::vector<std::size_t> moves;  // per op, in order

 private:
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
  // Every recorded copy in order, then wait().
  void run_all() const {
    for (std::size_t i = 0; i < copies_.size(); ++i) run(i);
    wait();
  }
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

// Where each op of a step other than its products read and wrote, op by op in OpTraffic's order:
// its events' tensors (a forward op's inputs and outputs, a backward node's gradients in and out),
// what a forward op saved that is neither (dropout's mask, a norm's statistics: written by it),
// and what a backward node released (what its forward saved: read by it). The engine's sums of
// gradients between nodes are in no op, and are left out, as OpTraffic leaves them.
class OpSpans : public Observer {
 public:
  struct Op {
    std::vector<bench::AddressSpan> reads, writes;
  };
  void on_op_begin(const OpEvent& e) override {
    moving_ = OpTraffic::moves_bytes(e.site.op);
    if (!moving_) return;
    op_ = Op{};
    add(e.input_tensors, op_.reads);
    saved_.clear();
  }
  void on_save(const SaveEvent& e) override {
    if (moving_) saved_.push_back(span(e.data, e.bytes));
  }
  void on_release(const SaveEvent& e) override {
    if (moving_) op_.reads.push_back(span(e.data, e.bytes));
  }
  void on_op_end(const OpEvent& e) override {
    if (!moving_) return;
    add(e.output_tensors, op_.writes);
    for (const bench::AddressSpan& s : saved_) {
      if (!within(s, op_.reads) && !within(s, op_.writes)) op_.writes.push_back(s);
    }
    ops.push_back(std::move(op_));
    moving_ = false;
  }
  std::vector<Op> ops;  // in order

 private:
  static bench::AddressSpan span(const void* data, std::size_t bytes) {
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    return {begin, begin + bytes};
  }
  static void add(const std::vector<Tensor>* tensors, std::vector<bench::AddressSpan>& to) {
    if (!tensors) return;
    for (const Tensor& t : *tensors) {
      if (t.defined() && t.bytes() > 0) to.push_back(span(t.raw_data(), t.bytes()));
    }
  }
  // Whether s overlaps one of `spans` (a saved input or output: already counted).
  static bool within(const bench::AddressSpan& s, const std::vector<bench::AddressSpan>& spans) {
    return std::any_of(spans.begin(), spans.end(), [&](const bench::AddressSpan& o) {
      return s.begin < o.end && o.begin < s.end;
    });
  }
  bool moving_ = false;
  Op op_;
  std::vector<bench::AddressSpan> saved_;  // by the forward op running
};

// OpSpans' ops as copies in the step's own memory (bench::stream_copies: what each read copied
// to what it wrote, at their offsets in the regions, and the longer side's rest to or from a
// scratch of kScratchBytes that stays in cache), with the backend's threaded copy. A piece from a
// region onto itself that overlaps is left out: an op that hands its gradient on as it is (an
// add's backward) moves nothing.
class OpCopyRunner {
 public:
  static constexpr std::size_t kScratchBytes = std::size_t{2} << 20;
  OpCopyRunner(const OpCopyRunner&) = delete;  // its pieces point at its scratch
  OpCopyRunner& operator=(const OpCopyRunner&) = delete;
  OpCopyRunner(Context& ctx, const std::vector<OpSpans::Op>& ops, StepMemory& memory)
      : backend_(ctx.backend()),
        scratch_(Tensor::zeros(ctx, Shape{static_cast<std::int64_t>(kScratchBytes)}, DType::u8)) {
    for (const OpSpans::Op& op : ops) {
      std::vector<Piece> pieces;
      for (const bench::CopyPiece& p : bench::stream_copies(op.reads, op.writes, kScratchBytes)) {
        const auto [from, from_offset] =
            p.from_scratch ? std::make_pair(&scratch_, std::int64_t{0}) : memory.locate(p.from);
        const auto [to, to_offset] =
            p.to_scratch ? std::make_pair(&scratch_, std::int64_t{0}) : memory.locate(p.to);
        const auto n = static_cast<std::int64_t>(p.bytes);
        if (from == to && from_offset < to_offset + n && to_offset < from_offset + n) continue;
        pieces.push_back({from, from_offset, to, to_offset, n});
        bytes_ += 2 * static_cast<double>(p.bytes);
      }
      ops_.push_back(std::move(pieces));
    }
  }
  void run(std::size_t i) const {
    for (const Piece& p : ops_[i]) {
      backend_.copy_slice(*p.from, 0, p.from_offset, *p.to, p.to_offset, p.bytes);
    }
  }
  // Reads a byte of the last piece's destination on the host: waits for the device, no more.
  void wait() const {
    for (auto op = ops_.rbegin(); op != ops_.rend(); ++op) {
      if (op->empty()) continue;
      unsigned char last = 0;
      const Piece& p = op->back();
      backend_.copy_to_host(&last, static_cast<unsigned char*>(p.to->raw_data()) + p.to_offset, 1);
      benchmark::DoNotOptimize(last);
      return;
    }
  }
  double total_bytes() const { return bytes_; }  // read and written, a step

 private:
  struct Piece {
    Tensor* from;
    std::int64_t from_offset;
    Tensor* to;
    std::int64_t to_offset;
    std::int64_t bytes;
  };
  Backend& backend_;
  Tensor scratch_;
  std::vector<std::vector<Piece>> ops_;
  double bytes_ = 0;
};

// A step's GEMMs (GemmLog) and other ops' traffic (OpTraffic), and their order: (true, i) for
// gemms.calls[i], (false, i) for traffic.moves[i].
class StepOrder : public Observer {
 public:
  void on_gemm(const GemmEvent& e) override {
    gemms.on_gemm(e);
    steps.emplace_back(true, gemms.calls.size() - 1);
  }
  void on_op_begin(const OpEvent& e) override {
    traffic.on_op_begin(e);
    spans.on_op_begin(e);
  }
  void on_save(const SaveEvent& e) override { spans.on_save(e); }
  void on_release(const SaveEvent& e) override { spans.on_release(e); }
  void on_op_end(const OpEvent& e) override {
    const std::size_t before = traffic.moves.size();
    traffic.on_op_end(e);
    spans.on_op_end(e);
    if (traffic.moves.size() > before) steps.emplace_back(false, before);
  }
  // The recorded products and copies in the step's order (BM_LayerFloor's iteration); Copies is
  // CopyRunner or OpCopyRunner.
  template <class Copies>
  void run_floor(const GemmRunner& gemm_runner, const Copies& copy_runner) const {
    for (const auto& [is_gemm, i] : steps) {
      if (is_gemm) {
        gemm_runner.run(i);
      } else {
        copy_runner.run(i);
      }
    }
    gemm_runner.wait();
  }
  // Every address span the step's products and other ops reached: StepMemory's.
  std::vector<bench::AddressSpan> all_spans() const {
    std::vector<bench::AddressSpan> all;
    for (const GemmCall& call : gemms.calls) {
      const std::array<std::uintptr_t, 3> bytes = call.bytes();
      for (std::size_t o = 0; o < 3; ++o) all.push_back({call.at[o], call.at[o] + bytes[o]});
    }
    for (const OpSpans::Op& op : spans.ops) {
      all.insert(all.end(), op.reads.begin(), op.reads.end());
      all.insert(all.end(), op.writes.begin(), op.writes.end());
    }
    return all;
  }
  GemmLog gemms;
  OpTraffic traffic;
  OpSpans spans;
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
  for (auto _ : state) copies.run_all();
  state.counters["ops"] = static_cast<double>(traffic.moves.size());
  state.counters["MB"] = copies.total_bytes() / 1e6;
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
  for (auto _ : state) order.run_floor(gemms, copies);
  state.counters["gemms"] = static_cast<double>(order.gemms.calls.size());
  state.counters["ops"] = static_cast<double>(order.traffic.moves.size());
}

// The wall time of a step's products, as their ops' begins and ends bound them (each product op's
// own checks and allocations included): BM_LayerPaired's timed step carries it, so that the step
// splits into its products and the rest. An observer with empty hooks costs a step at s=64 under
// 0.1% (docs/benchmarks.md, Observer overhead); this one reads the clock twice a product op.
class ProductClock : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override {
    if (OpTraffic::is_product(e.site.op)) begin_ = std::chrono::steady_clock::now();
  }
  void on_op_end(const OpEvent& e) override {
    if (!OpTraffic::is_product(e.site.op)) return;
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin_)
              .count();
  }
  double ms = 0;

 private:
  std::chrono::steady_clock::time_point begin_;
};

// Milliseconds of wall time that f takes.
template <typename F>
double wall_ms(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// BM_LayerStep, BM_LayerGemms, BM_LayerTraffic and BM_LayerFloor in turn, each iteration, on one
// layer, then in the step's own memory (StepMemory) the products alone, the floor (the products
// with BM_LayerTraffic's copies), and the floor with the other ops' copies there too
// (OpCopyRunner). The layer's second step (untimed, as the timed ones after it: its products add
// into the weights' gradients the first made) records the products and the other ops that the
// models run again. Each ratio is taken within an iteration, then the median over them.
void BM_LayerPaired(benchmark::State& state, Device device, LayerChoice choice) {
  const LayerConfig c = layer_config(state, choice);
  SteppedLayer stepped(c, device);
  stepped.step();
  StepOrder order;
  stepped.step_watched(order);
  StepMemory memory(stepped.ctx, order.all_spans());
  const GemmRunner gemms(stepped.ctx, order.gemms.calls, c.dtype);
  const GemmRunner own_gemms(stepped.ctx, order.gemms.calls, c.dtype, memory);
  const CopyRunner copies(stepped.ctx, order.traffic.moves);
  const OpCopyRunner own_copies(stepped.ctx, order.spans.ops, memory);
  struct Times {
    double step, products, gemm, traffic, floor, own, own_floor, mem_floor;
  };
  auto run_each = [&] {
    Times t{};
    ProductClock products;
    {
      const ObserverGuard watch(stepped.ctx, products);
      t.step = wall_ms([&] { stepped.step(); });
    }
    t.products = products.ms;
    t.gemm = wall_ms([&] { gemms.run_all(); });
    t.traffic = wall_ms([&] { copies.run_all(); });
    t.floor = wall_ms([&] { order.run_floor(gemms, copies); });
    t.own = wall_ms([&] { own_gemms.run_all(); });
    t.own_floor = wall_ms([&] { order.run_floor(own_gemms, copies); });
    t.mem_floor = wall_ms([&] { order.run_floor(own_gemms, own_copies); });
    return t;
  };
  // Untimed: the runners took memory the first step had left in the backend's cache, so the next
  // step maps new pages (at s=256, h=512 that step took 15 to 30% longer than the ones after it).
  run_each();
  std::vector<double> step_ms, gemm_ms, traffic_ms, floor_ms, over_gemm, apart, floor_over,
      products_ms, in_step, own_ms, own_over, own_floor_over, mem_floor_ms, mem_floor_over;
  for (auto _ : state) {
    const Times t = run_each();
    step_ms.push_back(t.step);
    products_ms.push_back(t.products);
    in_step.push_back(t.products / t.gemm);
    gemm_ms.push_back(t.gemm);
    traffic_ms.push_back(t.traffic);
    floor_ms.push_back(t.floor);
    over_gemm.push_back(t.step / t.gemm);
    apart.push_back((t.gemm + t.traffic) / t.gemm);
    floor_over.push_back(t.floor / t.gemm);
    own_ms.push_back(t.own);
    own_over.push_back(t.own / t.gemm);
    own_floor_over.push_back(t.own_floor / t.gemm);
    mem_floor_ms.push_back(t.mem_floor);
    mem_floor_over.push_back(t.mem_floor / t.gemm);
  }
  state.counters["step_ms"] = median(step_ms);
  state.counters["gemm_ms"] = median(gemm_ms);
  state.counters["traffic_ms"] = median(traffic_ms);
  state.counters["floor_ms"] = median(floor_ms);
  state.counters["step_over_gemm"] = median(over_gemm);
  state.counters["apart"] = median(apart);
  state.counters["floor_over_gemm"] = median(floor_over);
  state.counters["products_ms"] = median(products_ms);
  state.counters["in_step"] = median(in_step);
  state.counters["own_ms"] = median(own_ms);
  state.counters["own_over_gemm"] = median(own_over);
  state.counters["own_floor_over_gemm"] = median(own_floor_over);
  state.counters["mem_floor_ms"] = median(mem_floor_ms);
  state.counters["mem_floor_over_gemm"] = median(mem_floor_over);
  state.counters["gemm_MB"] = static_cast<double>(gemms.bytes()) / 1e6;
  state.counters["own_MB"] = static_cast<double>(memory.bytes()) / 1e6;
  state.counters["traffic_MB"] = copies.total_bytes() / 1e6;
  state.counters["mem_MB"] = own_copies.total_bytes() / 1e6;
}

// One of LayerKernels' kernels, by name: its time per call, its bytes (MB) and the rate they make
// (bytes_per_second).
void BM_LayerKernel(benchmark::State& state, Device device, LayerChoice choice,
                    const std::string& kernel) {
  const LayerConfig c = layer_config(state, choice);
  Context ctx(0, device);
  const bench::LayerKernels set(ctx, c);
  const auto& all = set.kernels();
  const auto it = std::find_if(all.begin(), all.end(), [&](const bench::LayerKernels::Kernel& k) {
    return k.name == kernel;
  });
  if (it == all.end()) {
    state.SkipWithError(("this layer has no kernel " + kernel).c_str());
    return;
  }
  it->run();  // untimed: the first call maps what it writes
  set.wait();
  for (auto _ : state) {
    it->run();
    set.wait();
  }
  state.counters["MB"] = it->bytes / 1e6;
  state.SetBytesProcessed(static_cast<std::int64_t>(it->bytes) * state.iterations());
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
      {"BM_LayerFloor", BM_LayerFloor},
      {"BM_LayerPaired", BM_LayerPaired}};
  for (const auto& [name, run] : layer_benchmarks) {
    auto* b = benchmark::RegisterBenchmark(name, run, flags.device, flags.layer);
    for (const auto& shape : shapes) b->Args(shape);
    b->ArgNames({"s", "b", "h", "a", "g"})->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  // The kernels of the layer flags.layer chose (names from a layer of the smallest sizes).
  LayerConfig probe_config;
  apply_model(flags.layer.model, probe_config);
  probe_config.dtype = flags.layer.dtype;
  Context probe(0, flags.device);
  const bench::LayerKernels probe_kernels(probe, probe_config);
  for (const bench::LayerKernels::Kernel& k : probe_kernels.kernels()) {
    auto* b = benchmark::RegisterBenchmark(("BM_LayerKernel/" + k.name).c_str(), BM_LayerKernel,
                                           flags.device, flags.layer, k.name);
    for (const auto& shape : shapes) b->Args(shape);
    b->ArgNames({"s", "b", "h", "a", "g"})->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
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
