// Communicator: collectives with NCCL semantics on contiguous host buffers, for one rank of a
// group. ThreadComm (ranks are threads) and MpiComm (ranks are processes) implement it; the
// layers use it through ProcessGroup, which records every call.
//
// Buffer sizes, with t = size() and `count` the CollectiveCall's count:
//   all_reduce      send, recv: count elements (may alias: in place)
//   all_gather      send: count; recv: t * count, rank i's chunk at i * count
//   reduce_scatter  send: count = t * chunk; recv: chunk, the sum of every rank's chunk `rank`
//   all_to_all      send: count = t * chunk, chunk j goes to rank j; recv: count, chunk i from i
//   broadcast       recv: count, the root's values (send is the root's buffer, may alias recv)
//   barrier         no buffers
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "autograd/errors.h"
#include "autograd/observer.h"

namespace shardscope {

class Context;

// A collective failed: a mismatch between ranks, a rank that failed, or a timeout. Every rank of
// the group gets one, with a message naming each rank's call.
class CommError : public Error {
 public:
  using Error::Error;
};

// Where a collective was issued from, for mismatch and timeout messages.
struct CallSite {
  std::string op;     // the autograd op: "gather_seq"
  std::string scope;  // "attn.qkv"
  int layer = -1;
  Phase phase = Phase::forward;
  std::int64_t step = 0;
  std::string str() const;  // "gather_seq in attn.qkv (layer 0, forward, step 0)"
};

// One collective as one rank issues it. Every rank of a group must issue the same kind, count,
// dtype, reduction and root; the check compares these, never the call sites.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::barrier;
  ReduceOp reduce = ReduceOp::sum;
  std::int64_t count = 0;
  DType dtype = DType::f32;
  int root = 0;
  CallSite site;
  bool same_as(const CollectiveCall& other) const;
  std::string str() const;  // "all_gather(count 512, f32) from gather_seq in attn.qkv (...)"
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend_name() const = 0;  // "threads", "mpi"
  // Runs `call` with this rank's buffers (see the table above). Throws CommError on a mismatch,
  // a failed rank or a timeout; ArgumentError for a call that is malformed on this rank.
  virtual void run(const CollectiveCall& call, const void* send, void* recv) = 0;
  // Ranks passing the same color form a new communicator, ordered by (key, old rank). Every rank
  // of this communicator must call it.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Marks this rank failed so every rank waiting in, or later entering, a collective gets a
  // CommError naming it and `reason`. Used when a rank's function throws.
  virtual void abort(const std::string& reason) = 0;
  // Called by the SPMD launchers with the rank's Context before its function runs. A device
  // communicator orders its collectives after the work the context's backend has queued (NcclComm:
  // an event on the CUDA backend's stream); host communicators need nothing.
  virtual void attach(Context& /*ctx*/) {}
  // Point-to-point, for the ring exercises of the labs. send copies `bytes` bytes into a mailbox
  // of `peer` and returns (buffered, so a ring of sends cannot deadlock); recv waits for the oldest
  // message from `peer`, which must have exactly `bytes` bytes. Messages between two ranks arrive
  // in the order they were sent. Only ThreadComm has them; the others throw ArgumentError.
  virtual void send(const void* data, std::size_t bytes, int peer);
  virtual void recv(void* data, std::size_t bytes, int peer);
};

// Elements of this rank's send and recv buffers for `call` in a group of `size` ranks (the table
// above): what a collective reads and writes.
std::int64_t send_elements(const CollectiveCall& call, int size);
std::int64_t recv_elements(const CollectiveCall& call, int size);

// Checks that `call` is well formed for a group of `size` ranks (count divisible by size where
// the kind needs it, a valid root, a floating dtype for reductions); throws ArgumentError.
void validate_call(const CollectiveCall& call, int size, int rank);

// The consistency check of the communicators whose ranks cannot read each other's calls (MpiComm,
// NcclComm): every rank describes its call in a fixed-size record, `all_gather_bytes(mine, all,
// bytes)` gives every rank every record (rank order), and a mismatch is a CommError on every rank
// listing each rank's call. Runs before any data moves.
using AllGatherBytes = std::function<void(const void* mine, void* all, std::size_t bytes)>;
void check_same_call(const CollectiveCall& call, int size, const AllGatherBytes& all_gather_bytes);

// The reduction helpers every implementation shares: out[i] (op)= in[i] for count elements.
void reduce_into(void* out, const void* in, std::int64_t count, DType dtype, ReduceOp op);

}  // namespace shardscope
