// TraceEvent: one recorded event of a run, the in-memory form of one entry of a shardscope trace
// (Chrome trace event JSON; the schema is docs/trace-format.md). The recorder appends them, the
// writer turns them into JSON, the reader turns JSON back into them; the visualizer reads them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
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
  std::vector<std::string> inputs;   // input shapes, "[2, 3, 4]" (backward: incoming grads)
  std::vector<std::string> outputs;  // output shapes (backward: outgoing grads); empty if it threw
  std::uint64_t alloc_bytes = 0;     // bytes allocated while the slice was open, nested included
  std::uint64_t saved_bytes = 0;     // bytes this forward op saved for backward (not parameters)
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
