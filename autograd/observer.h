// Observer: hooks the engine calls around every forward op, backward node, allocation, free and
// saved tensor. The memory ledger, the step debugger and (later) the trace recorder are observers.
// With none attached, each hook site costs one branch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "autograd/dtype.h"
#include "autograd/shape.h"

namespace shardscope {

class Tensor;

enum class Phase : std::uint8_t { forward, backward };
inline const char* phase_name(Phase p) {
  return p == Phase::forward ? "forward" : "backward";
}

// What a block of memory holds. Categories follow Korthikanti et al. 2022: saved activations are
// what backward keeps alive; LayerNorm statistics and the like are "saved_extra", never folded in.
enum class MemoryCategory : std::uint8_t {
  parameter,         // weights and biases
  gradient,          // gradients accumulated into leaves (parameter .grad)
  activation,        // forward outputs alive but not saved for backward
  saved_activation,  // tensors an op saved for its backward (the paper's activation memory)
  saved_extra,       // small saved tensors outside the paper's formula (LayerNorm mean and rstd)
  workspace,         // temporaries of backward and of kernels
  communication,     // collective buffers (parallel runs)
};
constexpr int kMemoryCategoryCount = 7;
const char* memory_category_name(MemoryCategory c);

// Why an op saved a tensor: an activation of the paper's formula, or an extra.
enum class SaveRole : std::uint8_t { activation, extra };

// Where the engine is: the op kind, the module scope it ran in, layer, phase, step and rank.
struct Site {
  std::string_view op;     // op kind: "matmul", "layernorm", ...
  std::string_view scope;  // module path the op ran in: "attn.qkv" (empty outside modules)
  Phase phase = Phase::forward;
  int layer = -1;  // -1 outside any layer
  std::int64_t step = 0;
  int rank = 0;
};

struct OpEvent {
  Site site;
  std::uint64_t seq = 0;  // the forward op's number, in its begin and end events and its node's
  std::string_view placement;  // a parallel op's placements, "Shard(0) -> Replicate"; else empty
  const std::vector<Shape>* inputs = nullptr;   // input shapes
  const std::vector<Shape>* outputs = nullptr;  // output shapes (on_op_end only; null when the
                                                // op threw)
  // The tensors themselves, for an observer that looks at values (the debugger's print), valid
  // only during the call: a forward op's inputs (begin) and outputs (end); a backward node's
  // gradients flowing in (begin) and out (end). Null where not known.
  const std::vector<Tensor>* input_tensors = nullptr;
  const std::vector<Tensor>* output_tensors = nullptr;
};

struct GemmDesc;

// A matrix product about to run on the backend: every product of the engine (matmul, and the ops
// built on it) goes through one call, so these are all of a step's GEMMs, in order.
struct GemmEvent {
  Site site;
  const GemmDesc* desc = nullptr;  // valid only during the call
  DType dtype = DType::f32;
  // Where the backend reads A and B and writes C (device memory on a device): a replay of the
  // step's products in the step's own memory (bench/layer_bench) follows them.
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
};

struct StorageEvent {
  Site site;  // the op that allocated (or, for a free, the op running when it was freed)
  std::uint64_t storage_id = 0;
  std::size_t bytes = 0;
  MemoryCategory category = MemoryCategory::activation;
  MemoryCategory previous = MemoryCategory::activation;  // on_recategorize only
};

struct SaveEvent {
  Site site;  // the op that saved (or whose backward released) the tensor
  std::uint64_t storage_id = 0;
  std::size_t bytes = 0;
  // Where the storage's bytes are (device memory on a device): a replay of the step's ops in the
  // step's own memory (bench/layer_bench) reads what a backward released where the step had it.
  const void* data = nullptr;
  SaveRole role = SaveRole::activation;
  MemoryCategory storage_category = MemoryCategory::activation;
};

// The collectives of the parallel layer (NCCL semantics; see parallel/comm/communicator.h).
enum class CollectiveKind : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast,
  barrier
};
enum class ReduceOp : std::uint8_t { sum, max };
const char* collective_name(CollectiveKind kind);  // "all_reduce", ...

// Why a collective ran: the layer's activations and their gradients, the reduction of replicated
// parameters' gradients, or bookkeeping (the loss, the reference check).
enum class CommPurpose : std::uint8_t { activation, param_grad, loss, check };
const char* comm_purpose_name(CommPurpose purpose);

struct CollectiveEvent {
  Site site;  // the op that issued it (its scope, layer, phase, step) and the rank
  CollectiveKind kind = CollectiveKind::barrier;
  ReduceOp reduce = ReduceOp::sum;
  CommPurpose purpose = CommPurpose::activation;
  int group_size = 1;
  std::int64_t count = 0;  // elements of this rank's send buffer
  DType dtype = DType::f32;
  double full_bytes = 0;  // N of the ring formula (see parallel/models/comm_model.h)
  double bytes_sent = 0;  // bytes this rank sends by the ring formula
  std::uint64_t seq = 0;  // the issuing op's number
};

class Observer {
 public:
  virtual ~Observer() = default;
  // Before an op computes (forward) or a node's backward runs; a debugger may block here.
  virtual void on_op_begin(const OpEvent&) {}
  virtual void on_op_end(const OpEvent&) {}
  virtual void on_alloc(const StorageEvent&) {}
  virtual void on_free(const StorageEvent&) {}
  // A storage changed category (a tensor became a parameter or a gradient).
  virtual void on_recategorize(const StorageEvent&) {}
  virtual void on_save(const SaveEvent&) {}
  virtual void on_release(const SaveEvent&) {}
  // Before a rank enters a collective (a debugger may block here) and after it completed.
  virtual void on_collective_begin(const CollectiveEvent&) {}
  virtual void on_collective(const CollectiveEvent&) {}
  // Before a matrix product runs (see GemmEvent).
  virtual void on_gemm(const GemmEvent&) {}
};

}  // namespace shardscope
