// TraceEvent: one recorded event of a run, the in-memory form of one entry of a shardscope trace
// (Chrome trace event JSON; the schema is docs/trace-format.md). The recorder appends them, the
// writer turns them into JSON, the reader turns JSON back into them; the visualizer reads them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/observer.h"

namespace shardscope {

// otherData.format and otherData.version of every trace file; a reader refuses other values.
inline constexpr const char* kTraceFormatName = "shardscope-trace";
inline constexpr int kTraceFormatVersion = 1;

enum class TraceEventKind : std::uint8_t {
  op,          // a forward op or a backward node: a complete slice ("X") on the compute lane
  collective,  // a collective: a complete slice ("X") on the collectives lane
  memory,      // live bytes of one rank by category after a change: a counter ("C")
  step,        // the rank entered a new step: an instant ("i")
};

// Where an event is drawn. Rank r is Chrome process r + 1 and its lanes are threads 1 and 2:
// Perfetto treats pid 0 and tid 0 as the kernel's idle task (google/perfetto#394).
inline constexpr int kComputeLane = 1;     // forward ops, backward nodes, counters, step marks
inline constexpr int kCollectiveLane = 2;  // collectives
inline int trace_pid(int rank) {
  return rank + 1;
}
inline int rank_of_pid(int pid) {
  return pid - 1;
}

// The shapes of an op slice's inputs or outputs as text ("[2, 3, 4]"), read like a
// std::vector<std::string>. Shared: a recorder keeps one copy per distinct list (every step
// repeats the last one's shapes), so recording a slice allocates nothing for them. A small heap
// block per slice that stayed alive among the step's tensors cost a run at s=64 about 1% of its
// step (docs/benchmarks.md, Observer overhead).
class ShapeStrings {
 public:
  ShapeStrings() = default;
  ShapeStrings(std::vector<std::string> strings)  // NOLINT: implicit, as a vector would be
      : strings_(std::make_shared<const std::vector<std::string>>(std::move(strings))) {}
  const std::vector<std::string>& strings() const { return strings_ ? *strings_ : empty_list(); }
  operator const std::vector<std::string>&() const { return strings(); }  // NOLINT
  bool empty() const { return strings().empty(); }
  std::size_t size() const { return strings().size(); }
  const std::string& operator[](std::size_t i) const { return strings()[i]; }
  const std::string& at(std::size_t i) const { return strings().at(i); }
  std::vector<std::string>::const_iterator begin() const { return strings().begin(); }
  std::vector<std::string>::const_iterator end() const { return strings().end(); }
  bool operator==(const ShapeStrings& other) const { return strings() == other.strings(); }

 private:
  static const std::vector<std::string>& empty_list() {
    static const std::vector<std::string> none;
    return none;
  }
  std::shared_ptr<const std::vector<std::string>> strings_;
};

struct TraceEvent {
  TraceEventKind kind = TraceEventKind::op;
  int rank = 0;
  std::int64_t step = 0;  // the Context's step when the event happened (explicit, never inferred)
  Phase phase = Phase::forward;
  int layer = -1;
  std::string op;         // op kind ("matmul"); for a collective, the op that issued it
  std::string scope;      // module path ("attn.qkv"), empty outside modules
  std::uint64_t seq = 0;  // the forward op's number (shared by its backward node)
  double ts_us = 0;       // start, microseconds since the recorder started
  double dur_us = 0;      // op and collective slices only

  // Op slices.
  std::string placement;  // op and collective: the parallel op's "Shard(0) -> Replicate", or ""
  ShapeStrings inputs;    // input shapes, "[2, 3, 4]" (backward: incoming grads)
  ShapeStrings outputs;   // output shapes (backward: outgoing grads); empty if it threw
  std::uint64_t alloc_bytes = 0;        // bytes allocated while the slice was open, nested included
  std::uint64_t saved_bytes = 0;        // bytes this forward op saved for backward (not parameters)
  std::uint64_t saved_extra_bytes = 0;  // of saved_bytes, the extras (LayerNorm mean and rstd)
  std::uint64_t released_bytes = 0;     // bytes of saved tensors this backward node released

  // Collective slices.
  CollectiveKind collective = CollectiveKind::barrier;
  CommPurpose purpose = CommPurpose::activation;
  ReduceOp reduce = ReduceOp::sum;
  int group_size = 1;
  std::int64_t count = 0;  // elements of this rank's send buffer
  DType dtype = DType::f32;
  double full_bytes = 0;  // N of the ring formula (parallel/models/comm_model.h)
  double bytes_sent = 0;  // bytes this rank sends by the ring formula

  // Memory counters: live bytes by MemoryCategory (indexed by the enum's value).
  std::array<std::uint64_t, kMemoryCategoryCount> memory{};
};

// What a trace says about itself (otherData in the file), beside its events.
struct TraceMeta {
  int version = kTraceFormatVersion;
  nlohmann::json config = nlohmann::json::object();  // the run's configuration, free-form
  std::vector<int> ranks;                            // one Chrome process each, ascending
  std::uint64_t max_events = 0;                      // the recorder's bound on kept events
  std::uint64_t dropped_events = 0;                  // events not kept once the bound was reached
  std::int64_t first_dropped_step =
      -1;  // the step of the first of them (written when some were); -1: none
  double clock_origin_unix_us = 0;  // wall clock (us since 1970) at ts 0, to align MPI ranks' files
};

inline const char* reduce_op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : "max";
}

}  // namespace shardscope
