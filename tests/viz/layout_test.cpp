// The module layout table against what the engine really does: every op of real recorded runs
// reads and writes local shapes of the table's tensors, parallel ops' placements agree, and the
// weights sit where ParallelTransformerLayer puts them; in a stack, every layer's ops against that
// layer's table, whose weights are the ones ParallelTransformerStack names after the layer.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>

#include "parallel/comm/spmd.h"
#include "parallel/layers/layer_stack.h"
#include "parallel/layers/parallel_layer.h"
#include "tests/viz/viz_testing.h"
#include "viz/model/layout.h"

namespace shardscope::viz {
namespace {

using testing::record_run;

Placement parse_placement(const std::string& text) {
  if (text == "Replicate") return Placement::replicate();
  if (text == "Partial") return Placement::partial();
  if (text.rfind("Shard(", 0) == 0) return Placement::shard(std::stoi(text.substr(6)));
  throw ArgumentError("parse_placement: expected Replicate, Partial or Shard(d), given " + text);
}

// The table's tensors whose local shape on a rank is `local`.
std::vector<const ModuleTensor*> matching(const ModuleLayout& layout, const Shape& local, int t) {
  std::vector<const ModuleTensor*> out;
  for (const ModuleTensor& m : layout.tensors) {
    if (local_shape(m.global, m.placement, t) == local) out.push_back(&m);
  }
  return out;
}

std::string describe(const TraceEvent& e) {
  return "rank " + std::to_string(e.rank) + " " + e.scope + "/" + e.op + " " + phase_name(e.phase) +
         " (op " + std::to_string(e.seq) + ")";
}

// Strict: no element-count relaxation is needed, because the table lists the reshaped and
// permuted views of the head split and merge (ModuleTensor::intermediate) with their own global
// shapes and placements, so every shape of every op matches a tensor exactly. In a stack of
// `layers` layers each op is matched against its own layer's table (the loss, in no layer,
// against the last layer's), and every layer runs a whole forward and backward.
void expect_every_op_matches(const std::string& mode, int degree,
                             void (*options)(LayerConfig&) = nullptr, int layers = 1) {
  SCOPED_TRACE(mode + " at degree " + std::to_string(degree) +
               (options ? " (Llama's options)" : "") +
               (layers > 1 ? " in a stack of " + std::to_string(layers) : ""));
  const TraceFile trace = layers > 1 ? testing::record_stack(mode, degree, layers)
                                     : record_run(mode, degree, 1, 16, 32, 4, options);
  const LayerConfig config = config_of_trace(trace);
  ASSERT_EQ(config.layers, layers);
  const int t = config.degree;
  std::map<std::pair<int, std::string>, ModuleLayout> layouts;  // by layer and scope
  for (int i = 0; i < layers; ++i) {
    for (const std::string& scope : module_scopes(config))
      layouts[{i, scope}] = module_layout(stack_layer(config, i), scope);
  }
  std::set<std::string> seen_scopes;
  std::map<int, int> ops_in;  // by layer
  int ops = 0;
  for (const TraceEvent& e : trace.events) {
    if (e.kind != TraceEventKind::op && e.kind != TraceEventKind::collective) continue;
    if (e.kind == TraceEventKind::collective && e.scope.empty())
      continue;  // checks, after the layer
    ASSERT_TRUE(has_module_layout(e.scope)) << describe(e) << ": scope has no layout";
    seen_scopes.insert(e.scope);
    if (e.scope == "loss") {  // its all-reduce (tp-sp, ulysses)
      EXPECT_EQ(e.layer, -1) << describe(e) << ": the loss is in no layer";
    } else {
      ASSERT_TRUE(e.layer >= 0 && e.layer < layers) << describe(e) << " in layer " << e.layer;
    }
    if (e.kind != TraceEventKind::op) continue;
    ++ops;
    ++ops_in[e.layer];
    const ModuleLayout& layout = layouts.at({e.layer < 0 ? layers - 1 : e.layer, e.scope});
    ASSERT_FALSE(e.outputs.empty()) << describe(e);
    // The weights the op's table shows are its own layer's ("layers.1.*" in layer 1).
    const std::string prefix = layers > 1 ? "layers." + std::to_string(e.layer) + "." : "";
    for (const ModuleTensor& m : layout.tensors) {
      if (!m.weight) continue;
      EXPECT_EQ(m.parameter.rfind(prefix, 0), 0u)
          << describe(e) << " in layer " << e.layer << ": the table's " << m.name << " is "
          << m.parameter;
    }
    for (const auto* list : {&e.inputs, &e.outputs}) {
      for (const std::string& text : *list) {
        EXPECT_FALSE(matching(layout, parse_shape_text(text), t).empty())
            << describe(e) << ": " << (list == &e.inputs ? "input " : "output ") << text
            << " is the local shape of no tensor of " << e.scope;
      }
    }
    // A parallel op names its placements: its first input and output must be such tensors.
    const std::size_t arrow = e.placement.find(" -> ");
    if (e.phase != Phase::forward || arrow == std::string::npos) continue;
    const Placement from = parse_placement(e.placement.substr(0, arrow));
    const Placement to = parse_placement(e.placement.substr(arrow + 4));
    auto has = [&](const std::string& text, Placement p) {
      for (const ModuleTensor* m : matching(layout, parse_shape_text(text), t)) {
        if (m->placement == p) return true;
      }
      return false;
    };
    EXPECT_TRUE(has(e.inputs.at(0), from))
        << describe(e) << ": no " << from.str() << " input " << e.inputs.at(0);
    EXPECT_TRUE(has(e.outputs.at(0), to))
        << describe(e) << ": no " << to.str() << " output " << e.outputs.at(0);
  }
  EXPECT_GT(ops, 30);  // a whole step ran (36 op slices on one device, forward and backward)
  for (int i = 0; i < layers; ++i) {
    EXPECT_GT(ops_in[i], 30) << "layer " << i << " ran no whole forward and backward";
  }
  // No dead rows: every module of the table shows up in the run (tp reduces no gradients).
  for (const std::string& scope : module_scopes(config)) {
    const bool expected = !layouts.at({0, scope}).tensors.empty() &&
                          !(scope == "loss" && (mode == "tp" || mode == "single"));
    if (expected) {
      EXPECT_EQ(seen_scopes.count(scope), 1u) << scope << " never ran";
    }
  }
}

TEST(ModuleLayout, EveryOpOfSingleMatchesTheTable) {
  expect_every_op_matches("single", 1);
}

TEST(ModuleLayout, EveryOpOfTpMatchesTheTable) {
  expect_every_op_matches("tp", 2);
  expect_every_op_matches("tp", 4);
}

TEST(ModuleLayout, EveryOpOfTpSpMatchesTheTable) {
  expect_every_op_matches("tp-sp", 2);
  expect_every_op_matches("tp-sp", 4);
}

TEST(ModuleLayout, EveryOpOfUlyssesMatchesTheTable) {
  expect_every_op_matches("ulysses", 2);
  expect_every_op_matches("ulysses", 4);
}

// A stack of 3: every op of layers 0, 1 and 2 (their shapes are the same; their weights' names
// differ, as the test after the next checks) against its layer's table.
TEST(ModuleLayout, EveryOpOfEachLayerOfAStackMatchesItsTable) {
  expect_every_op_matches("tp-sp", 2, nullptr, 3);
  expect_every_op_matches("ulysses", 2, nullptr, 3);
  expect_every_op_matches("tp", 2, nullptr, 3);
}

// RMSNorm (a weight only), SwiGLU (fc1 2f wide, f = 40 here), no biases, the rotary embedding
// (on Ulysses's sequence shards) and grouped-query attention (g = 2 of a = 4): the table follows
// the declaration's modules and parameters in every mode.
void llama_options(LayerConfig& c) {
  c.norm = Norm::rmsnorm;
  c.mlp = Mlp::swiglu;
  c.bias = false;
  c.ffn = 40;
  c.rope = true;
  c.kv_heads = 2;
}
TEST(ModuleLayout, EveryOpOfLlamasOptionsMatchesTheTableInEveryMode) {
  expect_every_op_matches("single", 1, llama_options);
  expect_every_op_matches("tp", 2, llama_options);       // g = 2 key/value heads split over t = 2
  expect_every_op_matches("tp-sp", 4, llama_options);    // t = 4 > g: each rank keeps its own one
  expect_every_op_matches("ulysses", 4, llama_options);  // repeated to t before the all-to-all
}

// Recomputation (--recompute): the checkpoint op (attn.core, or the whole layer's) and the ops
// the backward runs again, in their modules' scopes, match the table too.
void selective(LayerConfig& c) {
  c.recompute = Recompute::selective;
}
void full(LayerConfig& c) {
  c.recompute = Recompute::full;
}
void llama_selective(LayerConfig& c) {
  llama_options(c);
  c.recompute = Recompute::selective;
}
TEST(ModuleLayout, EveryOpUnderRecomputationMatchesTheTable) {
  for (const char* mode : {"tp", "tp-sp", "ulysses"}) {
    expect_every_op_matches(mode, 2, selective);
    expect_every_op_matches(mode, 2, full);
  }
  expect_every_op_matches("tp-sp", 4, llama_selective);  // grouped key/value heads, t > g
}

const ModuleTensor& find(const ModuleLayout& l, const std::string& name) {
  for (const ModuleTensor& m : l.tensors) {
    if (m.name == name) return m;
  }
  throw ArgumentError("no tensor \"" + name + "\" in " + l.scope);
}

LayerConfig config(ParallelMode mode, int degree) {
  LayerConfig c;
  c.mode = mode;
  c.degree = degree;
  return c;
}

TEST(ModuleLayout, RowParallelOutputIsPartialThenReducedOrScattered) {
  const ModuleLayout tp = module_layout(config(ParallelMode::tp, 4), "attn.proj");
  EXPECT_EQ(find(tp, "attn out partial").placement, Placement::partial());
  EXPECT_EQ(find(tp, "attn out partial").global, (Shape{16, 2, 32}));
  EXPECT_EQ(find(tp, "attn out").placement, Placement::replicate());
  EXPECT_EQ(find(tp, "context (merged)").placement, Placement::shard(2));
  const ModuleLayout sp = module_layout(config(ParallelMode::tp_sp, 4), "mlp.fc2");
  EXPECT_EQ(find(sp, "mlp out partial").placement, Placement::partial());
  EXPECT_EQ(find(sp, "mlp out").placement, Placement::shard(0));
  EXPECT_EQ(find(sp, "gelu out").dim_names, (std::vector<std::string>{"s", "b", "4h"}));
  const ModuleLayout u = module_layout(config(ParallelMode::ulysses, 4), "attn.heads");
  EXPECT_EQ(find(u, "q|k|v by sequence").placement, Placement::shard(0));
  EXPECT_EQ(find(u, "q|k|v by head").placement, Placement::shard(2));
  EXPECT_EQ(find(u, "q").placement, Placement::shard(1));
  const ModuleLayout single = module_layout(config(ParallelMode::single, 1), "attn.qkv");
  for (const ModuleTensor& m : single.tensors) EXPECT_EQ(m.placement, Placement::replicate());
}

TEST(ModuleLayout, UnknownScopeIsAnErrorNamingTheKnownOnes) {
  try {
    module_layout(config(ParallelMode::tp, 2), "attn.nope");
    FAIL() << "expected ArgumentError";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("attn.nope"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mlp.fc1"), std::string::npos) << e.what();
  }
}

// The placements and shapes ParallelTransformerLayer gives its parameters (rank 0's view). The
// local tensors stay behind: they must not outlive their rank's context.
struct RealParameter {
  std::string name;
  Placement placement;
  Shape global;
  bool partial_grad = false;
};

// A stack's (c.layers > 1) are ParallelTransformerStack's, named layers.<i>.<name>.
std::vector<RealParameter> real_parameters(const LayerConfig& c) {
  std::vector<RealParameter> out;
  std::mutex mutex;
  run_spmd(c.degree, SpmdOptions{}, [&](RankEnv& env) {
    ParallelTransformerStack stack(c, env.group, make_stack_weights(env.ctx, c));
    if (env.rank != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    for (const ShardedParameter& p : stack.parameters()) {
      out.push_back({p.name, p.placement, p.global, p.partial_grad});
    }
  });
  return out;
}

TEST(ModuleLayout, WeightsSitWhereTheParallelLayerPutsThem) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    const LayerConfig c = config(mode, 2);
    SCOPED_TRACE(mode_name(mode));
    const std::vector<RealParameter> params = real_parameters(c);
    ASSERT_EQ(params.size(), 12u);
    const ModuleLayout reduced = module_layout(c, "grad_reduce");
    for (const RealParameter& p : params) {
      int found = 0;
      for (const std::string& scope : module_scopes(c)) {
        if (scope == "grad_reduce") continue;
        for (const ModuleTensor& m : module_layout(c, scope).tensors) {
          if (m.parameter != p.name) continue;
          ++found;
          EXPECT_TRUE(m.weight) << p.name;
          EXPECT_EQ(m.placement, p.placement) << p.name << " in " << scope;
          EXPECT_EQ(m.global, p.global) << p.name << " in " << scope;
          EXPECT_EQ(m.dim_names.size(), static_cast<std::size_t>(p.global.rank())) << p.name;
        }
      }
      EXPECT_EQ(found, 1) << p.name << " should be read by exactly one module";
      int listed = 0;
      for (const ModuleTensor& m : reduced.tensors) {
        if (m.parameter != p.name) continue;
        ++listed;
        EXPECT_EQ(m.placement, Placement::partial()) << p.name;
      }
      EXPECT_EQ(listed, p.partial_grad ? 1 : 0) << p.name << " in grad_reduce";
    }
  }
}

// Each layer's table holds that layer's weights, named as the parallel stack names them
// (layers.1.attn.qkv.weight), with their placements; no other layer's table holds them.
TEST(ModuleLayout, EachLayerOfAStackReadsItsOwnWeights) {
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    LayerConfig c = config(mode, 2);
    c.layers = 3;
    SCOPED_TRACE(mode_name(mode));
    const std::vector<RealParameter> params = real_parameters(c);
    ASSERT_EQ(params.size(), 36u);
    for (const RealParameter& p : params) {
      std::vector<int> read_in, reduced_in;  // the layers whose tables list it
      for (int i = 0; i < c.layers; ++i) {
        for (const std::string& scope : module_scopes(c)) {
          for (const ModuleTensor& m : module_layout(stack_layer(c, i), scope).tensors) {
            if (m.parameter != p.name) continue;
            (scope == "grad_reduce" ? reduced_in : read_in).push_back(i);
            if (scope == "grad_reduce") continue;
            EXPECT_EQ(m.placement, p.placement) << p.name << " in " << scope;
            EXPECT_EQ(m.global, p.global) << p.name << " in " << scope;
          }
        }
      }
      const int layer = std::stoi(p.name.substr(std::string("layers.").size()));
      EXPECT_EQ(read_in, std::vector<int>{layer}) << p.name << " should be read in its layer only";
      EXPECT_EQ(reduced_in, p.partial_grad ? std::vector<int>{layer} : std::vector<int>{})
          << p.name << " in grad_reduce";
    }
  }
}

TEST(ModuleLayout, ParsesShapeText) {
  EXPECT_EQ(parse_shape_text("[4, 2, 32]"), (Shape{4, 2, 32}));
  EXPECT_EQ(parse_shape_text("[]"), Shape());
  EXPECT_EQ(parse_shape_text("[7]"), (Shape{7}));
  EXPECT_THROW(parse_shape_text("4, 2"), ArgumentError);
  EXPECT_THROW(parse_shape_text("[4, x]"), ArgumentError);
}

TEST(ModuleLayout, ProjectsTheShardedDimOntoRows) {
  const Projection a = projection_of(Shape{16, 2, 32}, Placement::shard(0));
  EXPECT_EQ(a.row_dim, 0);
  EXPECT_EQ(a.col_dim, 2);
  EXPECT_EQ(a.rows, 16);
  EXPECT_EQ(a.cols, 32);
  const Projection heads = projection_of(Shape{2, 4, 16, 8}, Placement::shard(1));
  EXPECT_EQ(heads.row_dim, 1);
  EXPECT_EQ(heads.rows, 4);
  const Projection last = projection_of(Shape{32, 96}, Placement::shard(1));
  EXPECT_EQ(last.row_dim, 0);
  EXPECT_EQ(last.col_dim, 1);
  const Projection vec = projection_of(Shape{96}, Placement::shard(0));
  EXPECT_EQ(vec.row_dim, -1);
  EXPECT_EQ(vec.col_dim, 0);
  EXPECT_EQ(slice_range(Shape{16, 2}, Placement::shard(0), 0, 1, 4),
            (std::pair<std::int64_t, std::int64_t>{4, 8}));
  EXPECT_EQ(slice_range(Shape{16, 2}, Placement::shard(0), 1, 1, 4),
            (std::pair<std::int64_t, std::int64_t>{0, 2}));
  // A negative shard dim counts from the end, as Shard(-1) does in the papers.
  const Projection neg = projection_of(Shape{16, 2, 32}, Placement{Placement::Kind::shard, -1});
  EXPECT_EQ(neg.row_dim, 0);
  EXPECT_EQ(neg.col_dim, 2);
  EXPECT_EQ(slice_range(Shape{16, 32}, Placement{Placement::Kind::shard, -1}, 1, 1, 4),
            (std::pair<std::int64_t, std::int64_t>{8, 16}));
}

}  // namespace
}  // namespace shardscope::viz
