// The ops a run executes, by op kind, module scope, phase and layer, found by a dry run of the
// same layer (one step, its own threads and contexts): what `shardscope debug` checks a
// breakpoint against, so a breakpoint on an op, scope or layer the run never reaches is refused
// with the nearest real names instead of waiting silently.
#pragma once

#include <set>
#include <string>
#include <tuple>

#include "autograd/debugger.h"
#include "parallel/run/layer_run.h"

namespace shardscope {

struct OpSite {
  std::string op;
  std::string scope;
  Phase phase = Phase::forward;
  int layer = -1;
  bool operator<(const OpSite& o) const {
    return std::tie(op, scope, phase, layer) < std::tie(o.op, o.scope, o.phase, o.layer);
  }
};

// Every (op, scope, phase, layer) one step of `spec` runs, on any rank (spec.layer.degree threads;
// the spec's dump, load and progress callbacks are not called).
std::set<OpSite> collect_op_sites(LayerRunSpec spec);

// "" when some site matches `breakpoint`; else why none does, with the nearest real names:
// "no op 'attn.qkv/matmull' runs in this layer; nearest: attn.qkv/matmul, ...".
std::string unmatched_breakpoint(const Breakpoint& breakpoint, const std::set<OpSite>& sites);

}  // namespace shardscope
