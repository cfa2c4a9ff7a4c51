// Lab 5's tests: g and g-bar, the sequence-parallel LayerNorm and its gradient all-reduce, and the
// TP-SP MLP block against the single-device block built from the framework's ops, at t = 1, 2 and
// 4 in f64 (ranks as threads), with the collectives each one issues and what it saves; then the
// predictions of saved bytes and communication against the MemoryLedger and the collective events
// of the framework's own blocks (parallel/layers/parallel_linear.h) in each layout. A failure names
// the likely mistake when the result stands in a recognisable relation to the right one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "labs/05-sequence-parallel/lab.h"
#include "labs/common/rank_testing.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/parallel_linear.h"

namespace shardscope::labs {
namespace {

constexpr int kDegrees[] = {1, 2, 4};
// s, b, h and the MLP's inner size f = 4h: small, and s and f divide by t = 4.
constexpr std::int64_t kS = 8, kB = 2, kH = 8, kF = 4 * kH;
const Shape kShape{kS, kB, kH};  // [s, b, h]

enum Seed : std::uint64_t {
  kSeedX = 101,
  kSeedLnW = 111,
  kSeedLnB,
  kSeedFc1W,
  kSeedFc1B,
  kSeedFc2W,
  kSeedFc2B,
  kSeedDy = 201,       // an upstream gradient [s, b, h]
  kSeedPerRank = 400,  // + rank: tensors that differ between ranks
};

// ---- what a rank issued and saved --------------------------------------------------------------

// g and g-bar, and the block built from them: the framework's own ops must not stand in for them.
const HandWritten kSpOperators{
    {"gather_seq", "reduce_scatter_seq", "gather_matmul", "copy_to_tp", "reduce_from_tp"},
    "this lab's task is to write g and g-bar yourself with apply_function (autograd/function.h) "
    "and build the block from them"};

// The two checks of an op this lab writes: its activation collectives in `phase` are exactly
// `want`, and none of them came from the framework's ops.
void expect_issued_by_hand(RankChecks& checks, int t, int r, const std::string& who,
                           const RankResult& res, Phase phase,
                           const std::vector<ExpectedCollective>& want, const std::string& hint) {
  EXPECT_ON_RANK(checks, r, issued(who + at(t, r), res.collectives, phase, want, hint));
  EXPECT_ON_RANK(checks, r, written_by_hand(who + at(t, r), res.collectives, kSpOperators));
}

std::string sites_text(const MemoryLedger& ledger) {
  std::ostringstream out;
  bool first = true;
  for (const MemoryLedger::SavedSite& s : ledger.saved_by_site()) {
    if (s.role != SaveRole::activation) continue;
    out << (first ? "" : ", ") << (s.scope.empty() ? "" : s.scope + "/") << s.op << " " << s.bytes;
    first = false;
  }
  return first ? "nothing" : out.str();
}

// ---- running the ranks -------------------------------------------------------------------------

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What a rank's error most likely means, for the errors the usual mistakes raise.
std::string hint_for(const std::string& message) {
  const std::string full = kShape.str();  // "[8, 2, 8]"
  if (has(message, "gradient of input 0 has shape " + full + ", expected [")) {
    return "a backward returned the whole [s, b, h] gradient where the input is a [s/t, b, h] "
           "shard: the backward of g must reduce-scatter (sum over the ranks and keep this "
           "rank's s/t rows), not all-reduce";
  }
  if (has(message, "gradient of input 0 has shape [") && has(message, "expected " + full)) {
    return "a backward returned a [s/t, b, h] gradient for a [s, b, h] input: the backward of "
           "g-bar must all-gather the ranks' row gradients";
  }
  if (has(message, "a Replicate of " + full) && has(message, "given f64[") &&
      !has(message, "given f64" + full)) {
    return "a result declared Replicate holds only this rank's rows: g's forward must all-gather "
           "the shards along dim 0 (sequence)";
  }
  if (has(message, "a Shard(0) of " + full) && has(message, "given f64" + full)) {
    return "a result declared Shard(0) holds all s rows: g-bar's forward must reduce-scatter "
           "(keep this rank's s/t rows of the sum), not all-reduce";
  }
  if (has(message, "use of an undefined tensor")) {
    return "an undefined tensor was used: a parameter that took no gradient has an undefined "
           "grad(); all_reduce_partial_gradients must skip it";
  }
  return "";
}

// run_ranks with this lab's hints for the errors the usual mistakes raise.
std::vector<RankResult> run_with_hints(int t, const RankBody& body) {
  return run_ranks(t, body, hint_for);
}

// ---- placements --------------------------------------------------------------------------------

std::string shard0_of(const Shape& global, int t) {
  return "Shard(0) of " + global.str() + ", local " +
         local_shape(global, Placement::shard(0), t).str();
}

std::string replicate_of(const Shape& global) {
  return "Replicate of " + global.str() + ", local " + global.str();
}

// ---- the data, the weights and the single-device reference -------------------------------------

// A full [s, b, h] tensor of the test data: every rank makes the same one from the seed.
Tensor full_tensor(Context& ctx, std::uint64_t seed) {
  return Tensor::randn(ctx, kShape, seed, 1.0, DType::f64);
}

// This rank's rows r s/t .. (r+1) s/t of the full tensor of `seed`: its Shard(0).
Tensor rows(RankEnv& env, std::uint64_t seed) {
  return slice_of_full(full_tensor(env.ctx, seed), Placement::shard(0), env.rank, env.world);
}

// The rank's x shard of the full input, as a leaf.
Tensor x_shard(RankEnv& env) {
  return leaf(rows(env, kSeedX));
}

// This rank's term of a Partial [s, b, h]: different on every rank.
Tensor partial_term(RankEnv& env) {
  return leaf(env.ctx, kShape, kSeedPerRank + env.rank);
}

Values rows_of(Context& ctx, const Values& full, int rank, int t) {
  return values_of(slice_of_full(tensor_of(ctx, full), Placement::shard(0), rank, t));
}

ParallelTensor through_g(RankEnv& env, const Tensor& x) {
  return g_gather_seq(env.group, ParallelTensor{x, Placement::shard(0), kShape});
}

ParallelTensor through_g_bar(RankEnv& env, const Tensor& x) {
  return g_bar_reduce_scatter_seq(env.group, ParallelTensor{x, Placement::partial(), kShape});
}

// The full weights: LayerNorm gamma near 1 and beta near 0 but not equal (a lost gamma shows).
SpMlpWeights full_weights(Context& ctx, std::int64_t h, std::int64_t f, DType dtype) {
  auto param = [&](const Shape& shape, std::uint64_t seed, double std, double mean,
                   const char* name) {
    return Tensor::parameter(Tensor::randn(ctx, shape, seed, std, dtype, mean), name);
  };
  return {param({h}, kSeedLnW, 0.1, 1.0, "ln.weight"),
          param({h}, kSeedLnB, 0.1, 0.0, "ln.bias"),
          param({h, f}, kSeedFc1W, 0.5, 0.0, "fc1.weight"),
          param({f}, kSeedFc1B, 0.5, 0.0, "fc1.bias"),
          param({f, h}, kSeedFc2W, 0.3, 0.0, "fc2.weight"),
          param({h}, kSeedFc2B, 0.5, 0.0, "fc2.bias")};
}

SpMlpWeights full_weights(Context& ctx) {
  return full_weights(ctx, kH, kF, DType::f64);
}

// This rank's shards as the framework slices them (parallel_layer.cpp's tp placements).
SpMlpWeights shard_weights(ProcessGroup& group, const SpMlpWeights& full) {
  std::vector<Tensor> out;
  for (const BlockParameter& p : full.parameters()) {
    out.push_back(shard_parameter(group, p.tensor, p.placement, p.name));
  }
  return {out[0], out[1], out[2], out[3], out[4], out[5]};
}

// The single-device block: gelu(LN(x) W1 + b1) W2 + b2, from the framework's ops.
Tensor reference_block(const Tensor& x, const SpMlpWeights& w) {
  const Tensor ln = layernorm(x, w.ln_weight, w.ln_bias);
  return add(matmul(gelu(add(matmul(ln, w.fc1_weight), w.fc1_bias)), w.fc2_weight), w.fc2_bias);
}

struct BlockReference {
  Values y, x_grad;
  std::map<std::string, Values> weights, grads;  // by parameter name
};

BlockReference reference_run(Context& ctx) {
  BlockReference ref;
  const SpMlpWeights w = full_weights(ctx);
  const Tensor x = leaf(ctx, kShape, kSeedX);
  const Tensor y = reference_block(x, w);
  y.backward(full_tensor(ctx, kSeedDy));
  ref.y = values_of(y);
  ref.x_grad = values_of(x.grad());
  for (const BlockParameter& p : w.parameters()) {
    ref.weights[p.name] = values_of(p.tensor);
    ref.grads[p.name] = values_of(p.tensor.grad());
  }
  return ref;
}

// Keeps each parameter's gradient as name + ".partial": before the gradient all-reduce.
void keep_partials(RankResult& out, const std::vector<BlockParameter>& params) {
  for (const BlockParameter& p : params) out.keep(p.name + ".partial", p.tensor.grad().clone());
}

// Runs the student's all_reduce_partial_gradients on `params`, keeping the collectives it issues
// (step "reduce") and each gradient after it under the parameter's name.
void reduce_and_keep(RankEnv& env, RankResult& out, const std::vector<BlockParameter>& params) {
  out.steps["reduce"] =
      collectives_of(env.ctx, [&] { all_reduce_partial_gradients(env.group, params); });
  for (const BlockParameter& p : params) out.keep(p.name, p.tensor.grad());
}

const char* kNoGradient =
    "no gradient arrived: is the tensor used through autograd ops (not detached), and does your "
    "op's backward return a gradient for it?";

// ---- task 1: g ---------------------------------------------------------------------------------

TEST(GOperator, ForwardAllGathersTheSequence) {
  Context ctx;
  const Values want = values_of(full_tensor(ctx, kSeedX));
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_with_hints(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = x_shard(env);
      const ParallelTensor y = through_g(env, x);
      out.keep("x", x);
      out.keep("y", y.local);
      out.placement = y.str();
    });
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r,
                     judge("g's output" + at(t, r), res["y"], want, t,
                           Hints().otherwise("g's output is the ranks' [s/t, b, h] shards "
                                             "concatenated along dim 0 (sequence), in rank order "
                                             "(group.all_gather does exactly that)"),
                           {{res["x"],
                             "g's output is this rank's own shard: g's forward must all-gather "
                             "the shards along the sequence dim"}}));
      EXPECT_ON_RANK(checks, r,
                     placement_is("g's output" + at(t, r), res.placement, replicate_of(kShape),
                                  "after g every rank holds the whole sequence: Replicate, with "
                                  "x's global shape"));
      expect_issued_by_hand(checks, t, r, "g", res, Phase::forward,
                            {{CollectiveKind::all_gather, kS / t * kB * kH}},
                            "g's forward is one all-gather of this rank's [s/t, b, h] shard");
    }
  }
}

TEST(GOperator, BackwardReduceScattersTheGradient) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_with_hints(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = x_shard(env);
      const ParallelTensor y = through_g(env, x);
      // Downstream of g the ranks compute different things: each sends back its own gradient.
      const Tensor dy = full_tensor(env.ctx, kSeedPerRank + env.rank);
      y.local.backward(dy);
      out.keep("dy", dy);
      out.keep("x.grad", x.grad());
    });
    const Values total = sum_of(per_rank(ranks, "dy"));
    Context ctx;
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(
          checks, r,
          judge("x.grad through g" + at(t, r), res["x.grad"], rows_of(ctx, total, r, t), t,
                Hints().otherwise("x.grad on rank r is rows r s/t .. (r+1) s/t of the sum over "
                                  "ranks of the gradients arriving at g's output"),
                {{rows_of(ctx, res["dy"], r, t),
                  "x.grad is this rank's rows of its own gradient: the ranks' gradients must be "
                  "summed as well: g's backward is a reduce-scatter, not a slice"},
                 {total,
                  "x.grad is the whole summed gradient [s, b, h]: g's backward must "
                  "reduce-scatter (keep this rank's s/t rows of the sum), not all-reduce"}},
                kNoGradient));
      expect_issued_by_hand(checks, t, r, "g", res, Phase::backward,
                            {{CollectiveKind::reduce_scatter, kS * kB * kH}},
                            "g's backward is one reduce-scatter of the [s, b, h] gradient");
    }
  }
}

// ---- task 2: g-bar -----------------------------------------------------------------------------

TEST(GBarOperator, ForwardReduceScattersThePartialSums) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_with_hints(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = partial_term(env);
      out.keep("x", x);  // a copy of the values before g-bar
      const ParallelTensor y = through_g_bar(env, x);
      out.keep("x.after", x);
      out.keep("y", y.local);
      out.placement = y.str();
    });
    const Values total = sum_of(per_rank(ranks, "x"));
    Context ctx;
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(
          checks, r,
          judge("g-bar's output" + at(t, r), res["y"], rows_of(ctx, total, r, t), t,
                Hints().otherwise("rank r's output is rows r s/t .. (r+1) s/t of the sum of the "
                                  "ranks' terms"),
                {{total,
                  "the output is the whole sum [s, b, h]: g-bar keeps only this rank's s/t rows "
                  "(reduce-scatter, not all-reduce)"},
                 {rows_of(ctx, res["x"], r, t),
                  "the output is this rank's rows of its own term: g-bar must sum the ranks' "
                  "terms (reduce-scatter), not slice"}}));
      EXPECT_ON_RANK(checks, r,
                     judge("g-bar's input x after g-bar" + at(t, r), res["x.after"], res["x"], t,
                           Hints().otherwise("g-bar changed its input in place: its output must "
                                             "be a new tensor")));
      EXPECT_ON_RANK(checks, r,
                     placement_is("g-bar's output" + at(t, r), res.placement, shard0_of(kShape, t),
                                  "g-bar turns a Partial into Shard(0) of the same global shape"));
      expect_issued_by_hand(checks, t, r, "g-bar", res, Phase::forward,
                            {{CollectiveKind::reduce_scatter, kS * kB * kH}},
                            "g-bar's forward is one reduce-scatter of the [s, b, h] term");
    }
  }
}

TEST(GBarOperator, BackwardAllGathersTheGradient) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_with_hints(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = partial_term(env);
      const ParallelTensor y = through_g_bar(env, x);
      // Downstream of g-bar each rank holds its rows: it gets the gradient of its rows.
      const Tensor dy = rows(env, kSeedDy);
      y.local.backward(dy);
      out.keep("dy", dy);
      out.keep("x.grad", x.grad());
    });
    Context ctx;
    const Values want = values_of(full_tensor(ctx, kSeedDy));
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r,
                     judge("x.grad through g-bar" + at(t, r), res["x.grad"], want, t,
                           Hints()
                               .if_times_t("the gathered gradient was summed as well: g-bar's "
                                           "backward is an all-gather, not an all-reduce")
                               .otherwise("every rank's term fed every row of the sum, so x.grad "
                                          "on every rank is the gradient of all s rows: the "
                                          "ranks' [s/t, b, h] gradients gathered in rank order"),
                           {{res["dy"],
                             "x.grad is this rank's own [s/t, b, h] gradient: g-bar's backward "
                             "must all-gather the rows' gradients from every rank"}},
                           kNoGradient));
      EXPECT_ON_RANK(checks, r,
                     issued("g-bar" + at(t, r), res.collectives, Phase::backward,
                            {{CollectiveKind::all_gather, kS / t * kB * kH}},
                            "g-bar's backward is one all-gather of this rank's [s/t, b, h] "
                            "gradient"));
    }
  }
}

// ---- the placements each op accepts -------------------------------------------------------------

// Runs `op` on a tensor of the wrong placement and expects a PlacementError.
::testing::AssertionResult refuses(const std::string& what,
                                   const std::function<void(RankEnv&)>& op) {
  std::string caught;
  try {
    run_spmd(2, spmd_options(), op);
  } catch (const SpmdError& e) {
    caught = e.what();
  }
  if (caught.empty()) {
    return ::testing::AssertionFailure()
           << what << ": no error; check the input's placement first with "
           << "expect_placement(group.ctx().where(\"...\"), x, Placement::...)";
  }
  if (caught.find("not implemented yet") != std::string::npos ||
      caught.find(": needs a ") == std::string::npos) {
    return ::testing::AssertionFailure()
           << what << ": expected a PlacementError from expect_placement (check the input's "
           << "placement before anything else), got: " << caught;
  }
  return ::testing::AssertionSuccess();
}

TEST(Placements, EachOpRefusesAnInputOfTheWrongPlacement) {
  EXPECT_TRUE(refuses("g on a Replicate input", [](RankEnv& env) {
    const Tensor x = leaf(Tensor::randn(env.ctx, kShape, kSeedX, 1.0, DType::f64));
    g_gather_seq(env.group, ParallelTensor{x, Placement::replicate(), kShape});
  }));
  EXPECT_TRUE(refuses("g-bar on a Shard(0) input", [](RankEnv& env) {
    const Tensor x = x_shard(env);
    g_bar_reduce_scatter_seq(env.group, ParallelTensor{x, Placement::shard(0), kShape});
  }));
  EXPECT_TRUE(refuses("sequence_parallel_layernorm on a Replicate input", [](RankEnv& env) {
    const SpMlpWeights w = full_weights(env.ctx);
    const Tensor x = leaf(Tensor::randn(env.ctx, kShape, kSeedX, 1.0, DType::f64));
    sequence_parallel_layernorm(env.group, ParallelTensor{x, Placement::replicate(), kShape},
                                w.ln_weight, w.ln_bias);
  }));
}

// ---- task 3: the LayerNorm of the sequence-parallel region --------------------------------------

struct LayerNormReference {
  Values y, x_grad, gamma_grad, beta_grad;
};

LayerNormReference reference_layernorm(Context& ctx) {
  const SpMlpWeights w = full_weights(ctx);
  const Tensor x = leaf(ctx, kShape, kSeedX);
  const Tensor y = layernorm(x, w.ln_weight, w.ln_bias);
  y.backward(full_tensor(ctx, kSeedDy));
  return {values_of(y), values_of(x.grad()), values_of(w.ln_weight.grad()),
          values_of(w.ln_bias.grad())};
}

// Each rank: its shard through the student's LayerNorm, backward from its rows of dy; with
// `reduce`, the student's all_reduce_partial_gradients on gamma and beta after backward.
RankBody layernorm_body(bool reduce) {
  return [reduce](RankEnv& env, RankResult& out) {
    const SpMlpWeights w = shard_weights(env.group, full_weights(env.ctx));
    const Tensor x = x_shard(env);
    const ParallelTensor y = sequence_parallel_layernorm(
        env.group, ParallelTensor{x, Placement::shard(0), kShape}, w.ln_weight, w.ln_bias);
    out.keep("y", y.local);
    out.placement = y.str();
    y.local.backward(rows(env, kSeedDy));
    out.keep("x.grad", x.grad());
    const std::vector<BlockParameter> gamma_beta = {
        {"ln.weight", w.ln_weight, Placement::replicate()},
        {"ln.bias", w.ln_bias, Placement::replicate()}};
    keep_partials(out, gamma_beta);
    if (reduce) reduce_and_keep(env, out, gamma_beta);
  };
}

TEST(SequenceParallelLayerNorm, NormalisesThisRanksRowsWithoutCommunicating) {
  Context ctx;
  const LayerNormReference want = reference_layernorm(ctx);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_with_hints(t, layernorm_body(false));
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r,
                     judge("LayerNorm output" + at(t, r), res["y"], rows_of(ctx, want.y, r, t), t,
                           Hints().otherwise("rank r's output is rows r s/t .. of the "
                                             "single-device LayerNorm: layernorm(x.local, gamma, "
                                             "beta, eps) on this rank's rows")));
      EXPECT_ON_RANK(
          checks, r,
          placement_is("LayerNorm output" + at(t, r), res.placement, shard0_of(kShape, t),
                       "the LayerNorm keeps x's sequence shard: Shard(0)"));
      EXPECT_ON_RANK(checks, r,
                     judge("x.grad through the LayerNorm" + at(t, r), res["x.grad"],
                           rows_of(ctx, want.x_grad, r, t), t, Hints(), {}, kNoGradient));
      for (const Phase phase : {Phase::forward, Phase::backward}) {
        EXPECT_ON_RANK_FOR(
            checks, phase_name(phase), r,
            issued("sequence_parallel_layernorm" + at(t, r), res.collectives, phase, {},
                   "a LayerNorm normalises each row over h, and every rank holds "
                   "whole rows: it needs no communication"));
      }
    }
    // Before the all-reduce each rank's gamma and beta gradients cover its own rows only.
    const std::vector<Values> gammas = per_rank(ranks, "ln.weight.partial");
    const std::vector<Values> betas = per_rank(ranks, "ln.bias.partial");
    EXPECT_TRUE(judge("gamma gradients summed over the ranks (t = " + std::to_string(t) + ")",
                      sum_of(gammas), want.gamma_grad, t, Hints(), {}, kNoGradient));
    EXPECT_TRUE(judge("beta gradients summed over the ranks (t = " + std::to_string(t) + ")",
                      sum_of(betas), want.beta_grad, t, Hints(), {}, kNoGradient));
  }
}

// ---- task 4: the gradient all-reduce after backward ---------------------------------------------

const char* kPartialGradient =
    "each rank holds only its partial sum over its own s/t rows (the ranks' gradients add up to "
    "the right one): all-reduce (sum) the gradients of the Replicate parameters after backward";
const char* kAveraged =
    "an average, not a sum: the loss sums over all s rows, so the ranks' partial gradients add "
    "up (ReduceOp::sum, no division by t)";
const char* kReducedTwice = "the gradient was all-reduced twice";

// A Replicate parameter's gradient after the all-reduce (kept under `name`, the one before it under
// name + ".partial") against the single-device one.
::testing::AssertionResult summed_gradient(const std::string& what, const RankResult& res,
                                           const std::string& name, const Values& want, int t,
                                           const std::string& if_undefined = kNoGradient,
                                           const std::string& twice = kReducedTwice) {
  return judge(what, res[name], want, t, Hints().if_over_t(kAveraged).if_times_t(twice),
               {{res[name + ".partial"], kPartialGradient}}, if_undefined);
}

// Each rank: a piece of a TP-SP block built from the framework's ops (LN on its rows -> gather_seq
// -> its fc1 columns), with a replicated parameter that takes no gradient; then the student's
// all_reduce_partial_gradients.
RankBody partial_gradients_body() {
  return [](RankEnv& env, RankResult& out) {
    const SpMlpWeights w = shard_weights(env.group, full_weights(env.ctx));
    const Tensor unused = Tensor::parameter(Tensor::zeros(env.ctx, {kH}, DType::f64), "unused");
    const Tensor x = x_shard(env);
    const ParallelTensor ln{layernorm(x, w.ln_weight, w.ln_bias), Placement::shard(0), kShape};
    const Tensor h = add(matmul(gather_seq(env.group, ln).local, w.fc1_weight), w.fc1_bias);
    const Tensor dh_full = Tensor::randn(env.ctx, {kS, kB, kF}, kSeedDy, 1.0, DType::f64);
    h.backward(slice_of_full(dh_full, Placement::shard(2), env.rank, env.world));
    const BlockParameter ln_weight{"ln.weight", w.ln_weight, Placement::replicate()},
        ln_bias{"ln.bias", w.ln_bias, Placement::replicate()},
        fc1_weight{"fc1.weight", w.fc1_weight, Placement::shard(1)},
        fc1_bias{"fc1.bias", w.fc1_bias, Placement::shard(0)};
    keep_partials(out, {ln_weight, ln_bias, fc1_weight, fc1_bias});
    reduce_and_keep(
        env, out,
        {ln_weight, fc1_weight, {"unused", unused, Placement::replicate()}, ln_bias, fc1_bias});
  };
}

TEST(PartialGradients, ReplicatedGradientsAreSummedShardedOnesLeftAlone) {
  Context ctx;
  const SpMlpWeights w = full_weights(ctx);
  const Tensor x = leaf(ctx, kShape, kSeedX);
  add(matmul(layernorm(x, w.ln_weight, w.ln_bias), w.fc1_weight), w.fc1_bias)
      .backward(Tensor::randn(ctx, {kS, kB, kF}, kSeedDy, 1.0, DType::f64));
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_with_hints(t, partial_gradients_body());
    RankChecks checks;
    for (const auto& [name, want] :
         {std::pair(std::string("ln.weight"), values_of(w.ln_weight.grad())),
          std::pair(std::string("ln.bias"), values_of(w.ln_bias.grad()))}) {
      for (int r = 0; r < t; ++r) {
        EXPECT_ON_RANK_FOR(checks, name, r,
                           summed_gradient(name + " gradient" + at(t, r),
                                           ranks[static_cast<std::size_t>(r)], name, want, t, ""));
      }
    }
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      for (const char* name : {"fc1.weight", "fc1.bias"}) {
        EXPECT_ON_RANK_FOR(
            checks, name, r,
            judge(std::string(name) + " gradient" + at(t, r), res[name],
                  res[std::string(name) + ".partial"], t,
                  Hints().otherwise("a sharded parameter's gradient changed: each rank's shard "
                                    "(here fc1's columns) already has its whole gradient, from all "
                                    "s rows after g; only the Replicate parameters' gradients are "
                                    "partial sums")));
      }
      EXPECT_ON_RANK(checks, r,
                     ::testing::AssertionResult(!res["unused"].defined)
                         << "unused parameter" << at(t, r)
                         << ": it got a gradient; a parameter without one must be skipped");
      const std::vector<Collective>& reduce = res.steps.at("reduce");
      int sums = 0;
      std::string wrong;
      for (const Collective& c : reduce) {
        if (c.kind == CollectiveKind::all_reduce && c.reduce == ReduceOp::sum &&
            c.purpose == CommPurpose::param_grad && c.count == kH) {
          ++sums;
        } else if (c.kind == CollectiveKind::all_reduce && c.purpose != CommPurpose::param_grad) {
          wrong = std::string("an all-reduce with purpose ") + comm_purpose_name(c.purpose) +
                  ": pass CommPurpose::param_grad, so the communication log files it under "
                  "parameter gradients";
        } else if (c.kind == CollectiveKind::all_reduce && c.reduce != ReduceOp::sum) {
          wrong = "an all-reduce with ReduceOp::max: the partial gradients add up (ReduceOp::sum)";
        }
      }
      EXPECT_ON_RANK(
          checks, r,
          ::testing::AssertionResult(wrong.empty() && sums == 2 && reduce.size() == 2)
              << "all_reduce_partial_gradients" << at(t, r) << ": issued "
              << describe(reduce, OpNames::short_form)
              << "; expected two all-reduces (sum, purpose param_grad) of [h], for ln.weight and "
                 "ln.bias"
              << (wrong.empty() ? "" : ": " + wrong));
    }
  }
}

TEST(SequenceParallelLayerNorm, GammaAndBetaGradientsMatchAfterTheAllReduce) {
  Context ctx;
  const LayerNormReference want = reference_layernorm(ctx);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_with_hints(t, layernorm_body(true));
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(
          checks, r,
          summed_gradient("gamma gradient" + at(t, r), res, "ln.weight", want.gamma_grad, t));
      EXPECT_ON_RANK(
          checks, r,
          summed_gradient("beta gradient" + at(t, r), res, "ln.bias", want.beta_grad, t));
    }
  }
}

// ---- task 5: the TP-SP MLP block ----------------------------------------------------------------

// Each rank: its shard through the student's block, with the activation bytes saved after the
// forward ("saved", and by op: "sites"); with `backward`, backward from its rows of dy and the
// student's gradient all-reduce.
std::vector<RankResult> run_block(int t, bool backward) {
  const RankBody body = [backward](RankEnv& env, RankResult& out) {
    const SpMlpWeights w = shard_weights(env.group, full_weights(env.ctx));
    const Tensor x = x_shard(env);
    ParallelTensor y;
    {
      MemoryLedger ledger;
      ObserverGuard guard(env.ctx, ledger);
      y = sp_mlp_block(env.group, ParallelTensor{x, Placement::shard(0), kShape}, w);
      out.numbers["saved"] = static_cast<double>(ledger.saved_activation_bytes());
      out.texts["sites"] = sites_text(ledger);
    }
    out.keep("y", y.local);
    out.placement = y.str();
    if (!backward) return;
    y.local.backward(rows(env, kSeedDy));
    keep_partials(out, w.parameters());
    reduce_and_keep(env, out, w.parameters());
    out.keep("x.grad", x.grad());
  };
  return run_with_hints(t, body);
}

// What the framework's block of the same structure saves per rank (g, then a plain matmul that
// keeps the gathered input): the reference for the student's block.
std::size_t reference_saved_bytes(int t);

TEST(SpMlpBlock, ForwardMatchesTheSingleDeviceBlock) {
  Context ctx;
  const BlockReference ref = reference_run(ctx);
  bool right_at_t1 = false;
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_block(t, false);
    const std::size_t want_saved = reference_saved_bytes(t);
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      const Values want = rows_of(ctx, ref.y, r, t);
      const std::string only_t =
          right_at_t1 && t > 1
              ? "the output is right at t = 1 and wrong at t = " + std::to_string(t) +
                    ": did you gather along dim 0 (sequence), keep the rows in rank order, and "
                    "take rank r's rows r s/t .. in g-bar?"
              : "";
      const bool ok = EXPECT_ON_RANK(
          checks, r,
          judge("block output" + at(t, r), res["y"], want, t, Hints().otherwise(only_t),
                {{ref.y,
                  "the output is the whole [s, b, h]: end with g-bar (reduce-scatter), which "
                  "keeps this rank's s/t rows, not an all-reduce"},
                 {rows_of(ctx, plus_times(ref.y, ref.weights.at("fc2.bias"), t - 1.0), r, t),
                  "output = want + (t - 1) x fc2's bias: the bias was added on every rank before "
                  "g-bar summed the terms; add it once, after g-bar"}}));
      if (t == 1 && ok) right_at_t1 = true;
      EXPECT_ON_RANK(checks, r,
                     placement_is("block output" + at(t, r), res.placement, shard0_of(kShape, t),
                                  "the block returns the sequence shard it was given: Shard(0)"));
      expect_issued_by_hand(checks, t, r, "block", res, Phase::forward,
                            {{CollectiveKind::all_gather, kS / t * kB * kH},
                             {CollectiveKind::reduce_scatter, kS * kB * kH}},
                            "the forward is g's all-gather before fc1 and g-bar's reduce-scatter "
                            "after fc2, nothing else");
      const auto saved = static_cast<std::size_t>(res.numbers.at("saved"));
      EXPECT_ON_RANK(
          checks, r,
          ::testing::AssertionResult(saved == want_saved)
              << "block" << at(t, r) << ": saved " << saved
              << " bytes of activations for backward, expected " << want_saved
              << " (LayerNorm input, the gathered fc1 input, GeLU and fc2 inputs); yours: "
              << res.texts.at("sites") << ". g and g-bar need nothing saved for their backward");
    }
  }
}

TEST(SpMlpBlock, GradientsMatchTheSingleDeviceBlock) {
  Context ctx;
  const BlockReference ref = reference_run(ctx);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_block(t, true);
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(
          checks, r,
          judge("input gradient" + at(t, r), res["x.grad"], rows_of(ctx, ref.x_grad, r, t), t,
                Hints()
                    .if_times_t("the ranks' gradients were summed twice: g's backward "
                                "reduce-scatter is the only sum x's gradient needs. The backward "
                                "of g must reduce-scatter, not all-reduce, and nothing between g "
                                "and fc1 may sum again (no copy_to_tp, no column_parallel_linear)")
                    .otherwise("the output matches but x's gradient does not: check g's backward "
                               "(reduce-scatter of the [s, b, h] gradient) and g-bar's "
                               "(all-gather of the [s/t, b, h] gradients)"),
                {}, kNoGradient));
      for (const char* name : {"ln.weight", "ln.bias", "fc2.bias"}) {
        const std::string twice =
            std::string(name) == "fc2.bias"
                ? "added before g-bar, fc2's bias sees the gradient of all s rows on every rank "
                  "(g-bar's backward gathers them), and the all-reduce then sums t copies: add "
                  "it after g-bar, to this rank's rows; or was it all-reduced twice?"
                : "the gradient was all-reduced twice, or (if the input gradient is t x want "
                  "too) the ranks' activation gradients were summed twice on the way back";
        EXPECT_ON_RANK_FOR(checks, name, r,
                           summed_gradient(std::string(name) + " gradient" + at(t, r), res, name,
                                           ref.grads.at(name), t, kNoGradient, twice));
      }
      EXPECT_ON_RANK(checks, r,
                     issued("block" + at(t, r), res.collectives, Phase::backward,
                            {{CollectiveKind::all_gather, kS / t * kB * kH},
                             {CollectiveKind::reduce_scatter, kS * kB * kH}},
                            "the backward is g-bar's all-gather and g's reduce-scatter (the "
                            "gradient all-reduces come after, with purpose param_grad)"));
    }
    for (const BlockParameter& p : SpMlpWeights{}.parameters()) {
      if (!p.placement.is_shard()) continue;
      EXPECT_TRUE(judge(p.name + " gradient (gathered, t = " + std::to_string(t) + ")",
                        gathered(ctx, ranks, p.name, p.placement), ref.grads.at(p.name), t,
                        Hints()
                            .if_times_t("a sharded parameter's gradient was summed over the "
                                        "ranks too? Only Replicate parameters are all-reduced")
                            .if_over_t("is g's forward gathering the whole sequence?"),
                        {}, kNoGradient));
    }
  }
}

// ---- the framework's blocks, measured -----------------------------------------------------------

struct Measured {
  double saved = 0, extras = 0;
  std::string sites;
  CommBytes comm;
  std::string collectives;
};

// The block in `layout` from the framework's linears (parallel/layers/parallel_linear.h) on rank 0
// of t, with its saved bytes after the forward and its collectives through the gradient all-reduce.
Measured measure(const BlockShape& shape, Layout layout) {
  const DType dtype = shape.A == 8 ? DType::f64 : DType::f32;
  const Shape global{shape.s, shape.b, shape.h};
  Measured m;
  run_spmd(shape.t, spmd_options(), [&](RankEnv& env) {
    const SpMlpWeights w = shard_weights(env.group, full_weights(env.ctx, shape.h, shape.f, dtype));
    const Placement in = layout == Layout::tp ? Placement::replicate() : Placement::shard(0);
    const Tensor x = leaf(
        slice_of_full(Tensor::randn(env.ctx, global, kSeedX, 1.0, dtype), in, env.rank, env.world));
    ParallelLinearOptions linear;
    linear.sequence_parallel = layout != Layout::tp;
    linear.keep_gathered_input = layout == Layout::tp_sp_keep_gathered;
    MemoryLedger ledger;
    CollectiveRecorder recorder;
    ObserverGuard watch(env.ctx, recorder);
    ParallelTensor y;
    {
      ObserverGuard guard(env.ctx, ledger);
      const ParallelTensor ln{layernorm(x, w.ln_weight, w.ln_bias), in, global};
      ParallelTensor h = column_parallel_linear(env.group, ln, w.fc1_weight, w.fc1_bias, linear);
      h.local = gelu(h.local);
      y = row_parallel_linear(env.group, h, w.fc2_weight, w.fc2_bias, linear);
    }
    y.local.backward(Tensor::full(env.ctx, y.local.shape(), 1.0, dtype));
    if (layout != Layout::tp) {  // as ParallelTransformerLayer::reduce_parameter_gradients
      for (const BlockParameter& p : w.parameters()) {
        if (p.placement.is_shard()) continue;
        Tensor g = p.tensor.grad();
        env.group.all_reduce(g, ReduceOp::sum, CommPurpose::param_grad);
      }
    }
    if (env.rank != 0) return;
    m.saved = static_cast<double>(ledger.saved_activation_bytes());
    m.extras = static_cast<double>(ledger.extras_bytes());
    m.sites = sites_text(ledger);
    std::vector<Collective> fwd, bwd, par;
    for (const Collective& c : recorder.events) {
      const bool param_grad = c.purpose == CommPurpose::param_grad;
      const bool forward = !param_grad && c.phase == Phase::forward;
      (param_grad ? par : forward ? fwd : bwd).push_back(c);
      (param_grad ? m.comm.param_grad : forward ? m.comm.forward : m.comm.backward) += c.bytes_sent;
    }
    m.collectives = "forward " + describe(fwd, OpNames::short_form) + "; backward " +
                    describe(bwd, OpNames::short_form) + "; param_grad " +
                    describe(par, OpNames::short_form);
  });
  return m;
}

std::size_t reference_saved_bytes(int t) {
  return static_cast<std::size_t>(
      measure({kS, kB, kH, kF, t, 8}, Layout::tp_sp_keep_gathered).saved);
}

const Layout kLayouts[] = {Layout::tp, Layout::tp_sp, Layout::tp_sp_keep_gathered};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::tp:
      return "tp";
    case Layout::tp_sp:
      return "tp_sp";
    case Layout::tp_sp_keep_gathered:
      return "tp_sp_keep_gathered";
  }
  return "?";
}

// The shapes of the predictions: f = 4h as in the layer, and f = 3h (so a 4h in the formula shows),
// in f64 and f32.
const BlockShape kShapes[] = {{8, 2, 8, 32, 1, 8}, {16, 3, 4, 12, 1, 4}, {4, 1, 8, 32, 1, 4}};

std::string shape_text(const BlockShape& s, Layout layout) {
  std::ostringstream out;
  out << layout_name(layout) << ", s = " << s.s << ", b = " << s.b << ", h = " << s.h
      << ", f = " << s.f << ", t = " << s.t << ", A = " << s.A;
  return out.str();
}

bool near(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
}

// A predicted number against the measured one, with the values that known mistakes give (every
// hint whose value it equals: at small t two mistakes can give the same number).
::testing::AssertionResult predicted(const std::string& what, double got, double want,
                                     const std::vector<std::pair<double, std::string>>& suspects,
                                     const std::string& detail) {
  if (near(got, want)) return ::testing::AssertionSuccess();
  std::ostringstream m;
  m << what << ": predicted " << got << " bytes, measured " << want;
  std::vector<std::string> said;
  for (const auto& [value, hint] : suspects) {
    if (near(got, value) && std::find(said.begin(), said.end(), hint) == said.end()) {
      m << (said.empty() ? "; " : "; or: ") << hint;
      said.push_back(hint);
    }
  }
  if (!detail.empty()) m << "\n  measured: " << detail;
  return ::testing::AssertionFailure() << m.str();
}

// Reports the first failure of each prediction (layout and field) and counts the rest, so one
// wrong term reads as one message, not one per shape and degree.
class FirstFailures {
 public:
  FirstFailures() = default;
  FirstFailures(const FirstFailures&) = delete;
  FirstFailures& operator=(const FirstFailures&) = delete;
  ~FirstFailures() {
    if (more_ > 0) {
      ADD_FAILURE() << more_ << " more wrong predictions of the same fields at other shapes "
                    << "and degrees (only the first of each is shown)";
    }
  }
  void expect(const std::string& key, const ::testing::AssertionResult& result) {
    if (result) return;
    if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) {
      ++more_;
      return;
    }
    seen_.push_back(key);
    ADD_FAILURE() << result.message();
  }

 private:
  std::vector<std::string> seen_;
  int more_ = 0;
};

// ---- task 6: predict the saved bytes ------------------------------------------------------------

TEST(PredictSavedBytes, MatchesTheMemoryLedger) {
  FirstFailures failures;
  for (BlockShape shape : kShapes) {
    for (int t : kDegrees) {
      shape.t = t;
      std::map<Layout, Measured> measured;
      for (Layout layout : kLayouts) measured[layout] = measure(shape, layout);
      const double A = static_cast<double>(shape.A);
      const double sbh = static_cast<double>(shape.s * shape.b * shape.h);
      for (Layout layout : kLayouts) {
        const Measured& m = measured[layout];
        const SavedBytes got = predict_saved_bytes(shape, layout);
        std::vector<std::pair<double, std::string>> suspects;
        if (shape.f != 4 * shape.h) {
          const double h = static_cast<double>(shape.h), f = static_cast<double>(shape.f);
          suspects.emplace_back(m.saved + 2 * A * sbh / t * (4 * h - f) / h,
                                "use shape.f, the MLP's width, not 4h");
        }
        suspects.emplace_back(m.saved + m.extras,
                              "the LayerNorm's mean and rstd are counted apart "
                              "(layernorm_stats), not among the activations");
        if (t > 1) {
          if (layout == Layout::tp_sp) {
            suspects.emplace_back(measured[Layout::tp_sp_keep_gathered].saved,
                                  "one of the two [s, b, h] terms is counted whole: in tp_sp the "
                                  "LayerNorm's input and fc1's saved input are both [s/t, b, h] "
                                  "shards (gather_matmul keeps only the shard and all-gathers it "
                                  "again in backward)");
          }
          if (layout == Layout::tp_sp_keep_gathered) {
            suspects.emplace_back(measured[Layout::tp_sp].saved,
                                  "that is tp_sp's figure; your block's matmul after g saves "
                                  "its input, the gathered [s, b, h], not the shard");
          }
          if (layout != Layout::tp) {
            suspects.emplace_back(measured[Layout::tp].saved,
                                  "that is tp's figure: under sequence parallelism the "
                                  "LayerNorm sees only s/t rows, so it saves A sbh/t");
          } else {
            suspects.emplace_back(measured[Layout::tp_sp].saved,
                                  "that is tp_sp's figure: under tp every rank runs the "
                                  "LayerNorm and fc1 on all s rows (A sbh each)");
          }
          suspects.emplace_back(m.saved * t,
                                "= t x measured: the GeLU and fc2 inputs are [s, b, f/t] per "
                                "rank (and the sharded terms /t)");
          suspects.emplace_back(m.saved / t, "= measured / t: which terms are not divided by t?");
        }
        const std::string key = layout_name(layout);
        failures.expect(
            key + ".activations",
            predicted("predict_saved_bytes(" + shape_text(shape, layout) + ").activations",
                      got.activations, m.saved, suspects, m.sites));
        const double rows = static_cast<double>(shape.s * shape.b);
        failures.expect(
            key + ".layernorm_stats",
            predicted(
                "predict_saved_bytes(" + shape_text(shape, layout) + ").layernorm_stats",
                got.layernorm_stats, m.extras,
                {{2 * A * rows,
                  "that is the statistics of all s b rows; under sequence "
                  "parallelism the LayerNorm normalises s b / t rows"},
                 {2 * A * rows / t, "that is s b / t rows; under tp every rank normalises all s b"},
                 {A * rows, "a mean and an rstd per row: two values"},
                 {A * rows / t, "a mean and an rstd per row: two values"}},
                ""));
      }
    }
  }
}

// ---- task 7: predict the communication ----------------------------------------------------------

TEST(PredictCommBytes, MatchesTheCollectiveEvents) {
  FirstFailures failures;
  for (BlockShape shape : kShapes) {
    for (int t : kDegrees) {
      shape.t = t;
      const double A = static_cast<double>(shape.A), td = t;
      const double N = A * static_cast<double>(shape.s * shape.b * shape.h);
      const double hbytes = A * static_cast<double>(shape.h);
      for (Layout layout : kLayouts) {
        const Measured m = measure(shape, layout);
        const CommBytes got = predict_comm_bytes(shape, layout);
        const std::string where = "predict_comm_bytes(" + shape_text(shape, layout) + ")";
        auto common = [&](double want) {
          std::vector<std::pair<double, std::string>> s;
          if (t == 1) return s;
          s.emplace_back(want * td / (td - 1),
                         "a ring collective sends (t-1)/t of N per rank, not all of N");
          s.emplace_back(want / td,
                         "N is the full tensor's bytes (A s b h: the gathered output, or the "
                         "input before it is scattered), not the local shard's");
          s.emplace_back(want * 2,
                         "an all-gather or a reduce-scatter sends (t-1)/t N per rank, half of "
                         "an all-reduce's 2 (t-1)/t N");
          s.emplace_back(want / 2,
                         "an all-reduce sends 2 (t-1)/t N: a reduce-scatter and an "
                         "all-gather");
          return s;
        };
        std::vector<std::pair<double, std::string>> fwd = common(m.comm.forward),
                                                    bwd = common(m.comm.backward),
                                                    par = common(m.comm.param_grad);
        if (t == 1) {
          const std::string none = "at t = 1 nothing is sent: the ring formulas give 0";
          fwd.emplace_back(got.forward, none);
          bwd.emplace_back(got.backward, none);
          par.emplace_back(got.param_grad, none);
        } else {
          const double share = (td - 1) / td;
          if (layout == Layout::tp_sp) {
            bwd.emplace_back(2 * share * N,
                             "gather_matmul saved only fc1's input shard: its backward "
                             "all-gathers it again to compute fc1's weight gradient");
          }
          if (layout == Layout::tp_sp_keep_gathered) {
            bwd.emplace_back(3 * share * N,
                             "your block's matmul kept the gathered input: no re-gather in "
                             "backward");
          }
          if (layout == Layout::tp) {
            par.emplace_back(got.param_grad,
                             "under tp every rank sees all s rows: the replicated parameters' "
                             "gradients are whole already, nothing is all-reduced");
          } else {
            par.emplace_back(0.0,
                             "under sequence parallelism ln.weight, ln.bias and fc2.bias get "
                             "partial gradients (each rank saw s/t rows): three all-reduces of "
                             "[h] after backward");
            par.emplace_back(2 * 2 * share * hbytes,
                             "two all-reduces: fc2's bias is added to the s/t rows after g-bar, "
                             "so its gradient is partial too");
          }
        }
        const std::string key = layout_name(layout);
        failures.expect(key + ".forward", predicted(where + ".forward", got.forward, m.comm.forward,
                                                    fwd, m.collectives));
        failures.expect(key + ".backward", predicted(where + ".backward", got.backward,
                                                     m.comm.backward, bwd, m.collectives));
        failures.expect(key + ".param_grad", predicted(where + ".param_grad", got.param_grad,
                                                       m.comm.param_grad, par, m.collectives));
      }
    }
  }
}

TEST(PredictCommBytes, SequenceParallelMovesTheActivationBytesOfTensorParallel) {
  FirstFailures failures;
  for (BlockShape shape : kShapes) {
    for (int t : kDegrees) {
      shape.t = t;
      const CommBytes tp = predict_comm_bytes(shape, Layout::tp);
      const CommBytes sp = predict_comm_bytes(shape, Layout::tp_sp_keep_gathered);
      // An all-reduce is a reduce-scatter followed by an all-gather: SP splits each of TP's two
      // all-reduces into its halves and moves the LayerNorm and dropout regions between them.
      failures.expect(
          "total",
          ::testing::AssertionResult(near(sp.forward + sp.backward, tp.forward + tp.backward))
              << shape_text(shape, Layout::tp_sp_keep_gathered) << ": predicted " << sp.forward
              << " + " << sp.backward << " activation bytes, tp " << tp.forward << " + "
              << tp.backward
              << "; they must be equal: each all-reduce of tp is a reduce-scatter and "
              << "an all-gather of the same N");
      failures.expect("forward", ::testing::AssertionResult(near(sp.forward, tp.forward))
                                     << shape_text(shape, Layout::tp_sp_keep_gathered)
                                     << ": forward, g's all-gather + g-bar's reduce-scatter ("
                                     << sp.forward << ") against tp's one all-reduce ("
                                     << tp.forward << ")");
    }
  }
}

}  // namespace
}  // namespace shardscope::labs
