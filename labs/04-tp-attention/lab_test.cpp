// Lab 4's tests: the head shards of the attention weights, the attention block on a rank's heads
// against the single-device attention (the framework's split_heads / attention_core /
// merge_heads, as TransformerLayer runs them) at t = 1, 2 and 4 in f64, the collectives it
// issues, and the predicted activation bytes against the framework's accounting
// (parallel/models/memory_model.h) and against the MemoryLedger's measurement of the student's own
// attention. A failure names the likely mistake when the result stands in a recognisable
// relation to the right one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "labs/04-tp-attention/lab.h"
#include "labs/common/rank_testing.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/attention_core.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/parallel_linear.h"
#include "parallel/layers/transformer_layer.h"
#include "parallel/models/memory_model.h"

namespace shardscope::labs {
namespace {

constexpr int kDegrees[] = {1, 2, 4};

// s, b, h, a: d = 4; a and h divide by t = 4; s is not a power of two so that a transposed
// [s, s] block shows.
LayerConfig test_config(int t, double dropout) {
  LayerConfig c;
  c.seq = 6;
  c.batch = 2;
  c.hidden = 16;
  c.heads = 4;
  c.dropout = dropout;
  c.seed = 7;
  c.dtype = DType::f64;
  c.mode = ParallelMode::tp;
  c.degree = t;
  return c;
}

Shape input_shape(const LayerConfig& c) {
  return {c.seq, c.batch, c.hidden};
}

// The seeds of the test data: every rank makes the same full tensors from them.
enum Seed : std::uint64_t {
  kSeedX = 101,
  kSeedQkvW = 111,
  kSeedQkvB,
  kSeedProjW,
  kSeedProjB,
  kSeedDy = 201,
};

// ---- the data and the single-device reference --------------------------------------------------

AttentionWeights full_weights(Context& ctx, const LayerConfig& c) {
  const std::int64_t h = c.hidden;
  auto param = [&](const Shape& shape, std::uint64_t seed, double std, const char* name) {
    return Tensor::parameter(Tensor::randn(ctx, shape, seed, std, c.dtype), name);
  };
  return {param({h, 3 * h}, kSeedQkvW, 0.3, "attn.qkv.weight"),
          param({3 * h}, kSeedQkvB, 0.3, "attn.qkv.bias"),
          param({h, h}, kSeedProjW, 0.3, "attn.proj.weight"),
          param({h}, kSeedProjB, 0.5, "attn.proj.bias")};
}

std::vector<std::pair<std::string, Tensor>> named(const AttentionWeights& w) {
  return {{"qkv.weight", w.qkv_weight},
          {"qkv.bias", w.qkv_bias},
          {"proj.weight", w.proj_weight},
          {"proj.bias", w.proj_bias}};
}

// Where the framework puts each weight under tp (parallel/layers/parallel_layer.cpp, tp_placement).
Placement placement_of(const std::string& name) {
  if (name == "qkv.weight") return Placement::shard(1);
  if (name == "qkv.bias" || name == "proj.weight") return Placement::shard(0);
  return Placement::replicate();
}

// The shards as the framework slices them, as parameters of the rank's context.
AttentionWeights reference_shards(ProcessGroup& group, const AttentionWeights& full) {
  auto shard = [&](const Tensor& w, const char* name) {
    return shard_parameter(group, w, placement_of(name), name);
  };
  return {shard(full.qkv_weight, "qkv.weight"), shard(full.qkv_bias, "qkv.bias"),
          shard(full.proj_weight, "proj.weight"), shard(full.proj_bias, "proj.bias")};
}

// The single-device attention block, exactly as TransformerLayer::attention runs it.
Tensor reference_attention(const LayerConfig& c, const Tensor& x, const AttentionWeights& w) {
  const Tensor qkv = add(matmul(x, w.qkv_weight), w.qkv_bias);
  const HeadTensors heads = split_heads(c, qkv, c.heads);
  const Tensor context = merge_heads(c, attention_core(c, heads, 0));
  return layer_dropout(c, "out_dropout", add(matmul(context, w.proj_weight), w.proj_bias),
                       kAttentionOutput);
}

// Rank r's Partial term of the output projection, computed on one device: its heads' context
// times its rows of W_proj. Its heads draw the dropout mask of `first_head` in a tensor of
// mask_config.heads heads (the right mask: first_head = r a/t and mask_config = c).
Tensor reference_partial(const LayerConfig& c, const Tensor& x, const AttentionWeights& full, int r,
                         int t, std::int64_t first_head, const LayerConfig& mask_config) {
  const Tensor qkv = add(matmul(x, slice_of_full(full.qkv_weight, Placement::shard(1), r, t)),
                         slice_of_full(full.qkv_bias, Placement::shard(0), r, t));
  const HeadTensors heads = split_heads(c, qkv, c.heads / t);
  return matmul(merge_heads(c, attention_core(mask_config, heads, first_head)),
                slice_of_full(full.proj_weight, Placement::shard(0), r, t));
}

// What the block gives when the heads of rank r draw the mask of (first_head(r), mask_config),
// the ranks' terms summed over `ranks` (all, or one rank's alone: a missing all-reduce), and the
// bias added `bias_copies` times.
struct Variation {
  std::function<std::int64_t(int)> first_head;
  LayerConfig mask_config;
  std::vector<int> ranks;
  double bias_copies = 1;
};

Values attention_variant(const LayerConfig& c, const Tensor& x, const AttentionWeights& full, int t,
                         const Variation& v) {
  Tensor sum;
  for (int r : v.ranks) {
    const Tensor term = reference_partial(c, x, full, r, t, v.first_head(r), v.mask_config);
    sum = sum.defined() ? add(sum, term) : term;
  }
  sum = add(sum, scale(full.proj_bias, v.bias_copies));
  return values_of(layer_dropout(c, "out_dropout", sum, kAttentionOutput));
}

std::vector<int> all_ranks(int t) {
  std::vector<int> ranks;
  for (int r = 0; r < t; ++r) ranks.push_back(r);
  return ranks;
}

struct AttentionReference {
  AttentionWeights full;
  Tensor x;
  Values y, x_grad;
  std::map<std::string, Values> grads;  // "qkv.weight", ...
};

AttentionReference reference_run(Context& ctx, const LayerConfig& c) {
  AttentionReference ref;
  ref.full = full_weights(ctx, c);
  ref.x = leaf(ctx, input_shape(c), kSeedX);
  const Tensor y = reference_attention(c, ref.x, ref.full);
  y.backward(Tensor::randn(ctx, input_shape(c), kSeedDy, 1.0, DType::f64));
  ref.y = values_of(y);
  ref.x_grad = values_of(ref.x.grad());
  for (const auto& [name, w] : named(ref.full)) ref.grads[name] = values_of(w.grad());
  return ref;
}

// Runs the student's attention on t ranks with the framework's shards; with `backward`, seeds
// the same upstream gradient on every rank (the output is Replicate: every rank computes the same
// loss downstream).
std::vector<RankResult> run_attention(int t, double dropout, bool backward) {
  const LayerConfig c = test_config(t, dropout);
  return run_ranks(t, [&c, backward](RankEnv& env, RankResult& out) {
    const AttentionWeights shards = reference_shards(env.group, full_weights(env.ctx, c));
    const Tensor x = leaf(env.ctx, input_shape(c), kSeedX);
    const ParallelTensor y = parallel_attention(
        env.group, c, ParallelTensor{x, Placement::replicate(), input_shape(c)}, shards);
    out.keep("y", y.local);
    out.placement = y.str();
    if (!backward) return;
    y.local.backward(Tensor::randn(env.ctx, input_shape(c), kSeedDy, 1.0, DType::f64));
    out.keep("x.grad", x.grad());
    for (const auto& [name, w] : named(shards)) out.keep(name + ".grad", w.grad());
  });
}

const char* const kReplicated = "Replicate of [6, 2, 16], local [6, 2, 16]";
const char* const kNoGradient =
    "no gradient arrived: is the tensor used through autograd ops (not detached)?";
const char* const kWrongMask =
    "your heads draw another part of the dropout mask: the attention dropout must draw the "
    "single-device mask of this rank's heads, layer_dropout(config, \"dropout\", probs, "
    "kAttentionProbs, Shape{b, a, s, s}, {0, rank * a/t, 0, 0}) with a all the heads";

// ---- task 1: the shards ------------------------------------------------------------------------

TEST(ShardAttentionWeights, HoldThisRanksHeads) {
  for (int t : kDegrees) {
    const LayerConfig c = test_config(t, 0.0);
    const std::vector<RankResult> ranks = run_ranks(t, [&c](RankEnv& env, RankResult& out) {
      const AttentionWeights full = full_weights(env.ctx, c);
      const AttentionWeights mine = shard_attention_weights(env.group, c, full);
      const auto want = named(reference_shards(env.group, full));
      const auto got = named(mine);
      const std::int64_t h = c.hidden;
      const int r = env.rank, world = env.world;
      for (std::size_t i = 0; i < got.size(); ++i) {
        keep_shard(env, out, got[i].first, got[i].second, want[i].second);
      }
      // The slices a wrong reading of the layout gives. [q | k | v] blocks: rank r's h/t columns
      // of each block.
      out.keep("qkv.weight.blocks", reshape(slice_of_full(reshape(full.qkv_weight, {h, 3, h}),
                                                          Placement::shard(2), r, world),
                                            {h, 3 * h / world}));
      out.keep("qkv.bias.blocks",
               reshape(slice_of_full(reshape(full.qkv_bias, {3, h}), Placement::shard(1), r, world),
                       {3 * h / world}));
      out.keep("qkv.weight.rows", slice_of_full(full.qkv_weight, Placement::shard(0), r, world));
      out.keep("proj.weight.columns",
               slice_of_full(full.proj_weight, Placement::shard(1), r, world));
      out.keep("proj.bias.slice", slice_of_full(full.proj_bias, Placement::shard(0), r, world));
      out.keep("qkv.bias.whole", full.qkv_bias);
    });
    const std::string blocks =
        "you took rank r's columns of each of the Q, K and V blocks, a [q | k | v] layout "
        "(PyTorch's): shardscope groups the columns by head, (head * 3 + j) * d + i, so rank r's "
        "heads are one contiguous block of 3h/t columns";
    expect_shards(
        ranks, t,
        {{"qkv.weight",
          {{"qkv.weight.blocks", blocks},
           {"qkv.weight.rows",
            "the QKV linear is column parallel: split its weight [h, 3h] on the output dim (dim "
            "1)"}}},
         {"qkv.bias",
          {{"qkv.bias.blocks", blocks},
           {"qkv.bias.whole", "the QKV bias is split like its columns: rank r holds [3h/t]"}}},
         {"proj.weight",
          {{"proj.weight.columns",
            "the output projection is row parallel: rank r holds the rows [h/t, h] that read its "
            "heads' context features"}}},
         {"proj.bias",
          {{"proj.bias.slice",
            "the projection's bias is not split: every rank holds all of [h] and adds it once, "
            "after the all-reduce"}}}});
  }
}

// ---- task 2: the attention ---------------------------------------------------------------------

// Three mistakes of the attention math itself, each wrong at t = 1 already.
enum class MathBug {
  none,
  scale_by_h,         // scores scaled by 1/sqrt(h), not 1/sqrt(d) = 1/sqrt(h/a)
  scale_by_h_over_t,  // 1/sqrt(h/t): the local width
  qkv_blocks,         // the local qkv read as [q | k | v] blocks, not grouped by head
  merge_d_major,      // the heads merged as [s, b, d, heads], not [s, b, heads, d]
};

// The attention block (dropout 0) as t ranks with `bug` would compute it, on one device from the
// full weights: the sum of the ranks' projected contexts, plus the bias.
Values attention_with(const LayerConfig& c, const Tensor& x, const AttentionWeights& full, int t,
                      MathBug bug) {
  const std::int64_t s = c.seq, b = c.batch, heads = c.heads / t, d = c.head_dim();
  const double width = bug == MathBug::scale_by_h          ? static_cast<double>(c.hidden)
                       : bug == MathBug::scale_by_h_over_t ? static_cast<double>(c.hidden / t)
                                                           : static_cast<double>(d);
  Tensor sum;
  for (int r = 0; r < t; ++r) {
    const Tensor qkv = add(matmul(x, slice_of_full(full.qkv_weight, Placement::shard(1), r, t)),
                           slice_of_full(full.qkv_bias, Placement::shard(0), r, t));
    const std::vector<Tensor> parts =
        bug == MathBug::qkv_blocks
            ? chunk(permute(reshape(qkv, {s, b, 3, heads, d}), {2, 1, 3, 0, 4}), 0, 3)
            : chunk(permute(reshape(qkv, {s, b, heads, 3, d}), {3, 1, 2, 0, 4}), 0, 3);
    auto part = [&](int i) {
      return reshape(parts[static_cast<std::size_t>(i)], {b, heads, s, d});
    };
    const Tensor probs = softmax(
        scale(matmul(part(0), part(1), /*transpose_b=*/true), 1.0 / std::sqrt(width)), c.causal);
    const Tensor context =
        reshape(permute(matmul(probs, part(2)), bug == MathBug::merge_d_major
                                                    ? std::vector<int>{2, 0, 3, 1}
                                                    : std::vector<int>{2, 0, 1, 3}),
                {s, b, heads * d});
    const Tensor term = matmul(context, slice_of_full(full.proj_weight, Placement::shard(0), r, t));
    sum = sum.defined() ? add(sum, term) : term;
  }
  return values_of(add(sum, full.proj_bias));
}

const char* const kWrongAtOneRank =
    "wrong at t = 1 too, so the attention math is off, not the "
    "parallel part";

// The attention output (dropout 0) of rank r at degree t against the single-device one; a mistake
// of the attention math is named by computing each suspect's output. `wrong_at_one_rank`: the
// output was wrong at t = 1 already.
::testing::AssertionResult judge_forward(const LayerConfig& c, const AttentionReference& ref, int t,
                                         int r, const Values& got, bool wrong_at_one_rank) {
  LayerConfig bidirectional = c;
  bidirectional.causal = false;
  const Values b = values_of(ref.full.proj_bias);
  const Values partial =
      values_of(reference_partial(c, ref.x, ref.full, r, t, r * (c.heads / t), c));
  const std::vector<Suspect> suspects = {
      {plus_times(ref.y, b, t - 1.0),
       "output = want + (t - 1) x the projection's bias: is the bias added on every rank "
       "before the all-reduce? Add it once, after g"},
      {plus_times(partial, b, 1.0),
       "the output is this rank's Partial term plus the bias: is g's all-reduce after the "
       "output projection missing?"},
      {values_of(reference_attention(bidirectional, ref.x, ref.full)),
       "the output is the attention without the causal mask: softmax(scores, config.causal)"},
      {attention_with(c, ref.x, ref.full, t, MathBug::scale_by_h),
       "the scores are scaled by 1/sqrt(h): the scale is 1/sqrt(d), d = h/a the head dim"},
      {attention_with(c, ref.x, ref.full, t, MathBug::scale_by_h_over_t),
       "the scores are scaled by 1/sqrt(h/t), the local width: the scale is 1/sqrt(d), d = h/a "
       "the head dim, whatever t"},
      {attention_with(c, ref.x, ref.full, t, MathBug::qkv_blocks),
       "your q, k and v are [q | k | v] blocks of the local qkv: it is grouped by head, "
       "[s, b, a/t, 3, d] (with one head per rank, t = 4, the two layouts coincide)"},
      {attention_with(c, ref.x, ref.full, t, MathBug::merge_d_major),
       "the heads are merged as [s, b, d, a/t]: merge them head-major, [s, b, a/t, d] -> "
       "[s, b, a/t * d] (with one head per rank, t = 4, the two orders coincide)"}};
  ::testing::AssertionResult result =
      judge("attention output, dropout 0" + at(t, r), got, ref.y, t,
            Hints()
                .if_times_t("is the output all-reduced twice?")
                .otherwise("check the head split: the local qkv [s, b, 3h/t] is "
                           "[s, b, a/t, 3, d] (grouped by head, then q, k, v); scores "
                           "are q k^T / sqrt(d) with d = h/a; the merged context is "
                           "[s, b, a/t * d] in head order"),
            suspects);
  if (result) return result;
  if (t == 1) {
    return ::testing::AssertionFailure()
           << result.message() << "; at t = 1 (one rank, no communication) the attention math "
           << "is off, not the parallel part";
  }
  if (wrong_at_one_rank) {
    return ::testing::AssertionFailure() << result.message() << "; " << kWrongAtOneRank;
  }
  return result;
}

// t = 1 and 2 stay in the loop: a head split or merge in the wrong order passes at t = 4 (one head
// per rank).
TEST(ParallelAttention, ForwardMatchesWithoutDropout) {
  bool wrong_at_one_rank = false;
  for (int t : kDegrees) {
    const LayerConfig c = test_config(t, 0.0);
    Context ctx;
    const AttentionReference ref = reference_run(ctx, c);
    const std::vector<RankResult> ranks = run_attention(t, 0.0, false);
    NoGradGuard no_grad(ctx);
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      const ::testing::AssertionResult result =
          judge_forward(c, ref, t, r, res["y"], wrong_at_one_rank);
      if (t == 1 && !result) wrong_at_one_rank = true;
      EXPECT_ON_RANK(checks, r, result);
      EXPECT_ON_RANK(checks, r,
                     placement_is("attention output" + at(t, r), res.placement, kReplicated,
                                  "after the row-parallel projection the output is Replicate"));
    }
  }
}

TEST(ParallelAttention, ForwardMatchesWithDropout) {
  for (int t : kDegrees) {
    const LayerConfig c = test_config(t, 0.1);
    Context ctx;
    const AttentionReference ref = reference_run(ctx, c);
    const std::vector<RankResult> ranks = run_attention(t, 0.1, false);
    NoGradGuard no_grad(ctx);
    LayerConfig local_heads = c;  // a mask drawn on the local [b, a/t, s, s] as if it were whole
    local_heads.heads = c.heads / t;
    const std::int64_t heads = c.heads / t;
    auto right_head = [heads](int r) { return r * heads; };
    auto head_zero = [](int) { return std::int64_t{0}; };
    const std::vector<Suspect> wrong_masks = {
        {attention_variant(c, ref.x, ref.full, t, {head_zero, c, all_ranks(t), 1}), kWrongMask},
        {attention_variant(c, ref.x, ref.full, t, {head_zero, local_heads, all_ranks(t), 1}),
         kWrongMask},
        {attention_variant(c, ref.x, ref.full, t, {right_head, c, all_ranks(t), t * 1.0}),
         "the projection's bias arrives t times (before the output dropout): is the bias added "
         "on every rank before the all-reduce? Add it once, after g"}};
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      std::vector<Suspect> suspects = wrong_masks;
      suspects.push_back({attention_variant(c, ref.x, ref.full, t, {right_head, c, {r}, 1}),
                          "the output is this rank's Partial term: is g's all-reduce after the "
                          "output projection missing?"});
      EXPECT_ON_RANK(checks, r,
                     judge("attention output, dropout 0.1" + at(t, r),
                           ranks[static_cast<std::size_t>(r)]["y"], ref.y, t,
                           Hints().otherwise(
                               "if ForwardMatchesWithoutDropout passes, look at the two "
                               "dropouts: the attention's on the probabilities (site "
                               "kAttentionProbs, this rank's heads of the [b, a, s, s] mask) and "
                               "the output's after the all-reduce (site kAttentionOutput, the "
                               "whole tensor)"),
                           suspects));
    }
  }
}

TEST(ParallelAttention, InputGradientMatches) {
  for (int t : kDegrees) {
    Context ctx;
    const AttentionReference ref = reference_run(ctx, test_config(t, 0.0));
    expect_input_gradient(
        "attention input gradient", run_attention(t, 0.0, true), ref.x_grad, t,
        "x.grad is this rank's partial term (its heads' part; summed over the ranks it is right): "
        "is the backward all-reduce of f before the QKV linear missing?",
        kNoGradient);
  }
}

TEST(ParallelAttention, WeightGradientsMatch) {
  for (int t : kDegrees) {
    Context ctx;
    const AttentionReference ref = reference_run(ctx, test_config(t, 0.0));
    expect_weight_gradients(ctx, run_attention(t, 0.0, true), t, ref.grads, placement_of,
                            kNoGradient);
  }
}

TEST(ParallelAttention, IssuesOneAllReduceInForwardAndOneInBackward) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_attention(t, 0.1, true);
    const LayerConfig c = test_config(t, 0.1);
    const std::int64_t sbh = c.seq * c.batch * c.hidden;
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const std::vector<Collective>& list = ranks[static_cast<std::size_t>(r)].collectives;
      EXPECT_ON_RANK(
          checks, r,
          issued("attention" + at(t, r), list, Phase::forward, 1, sbh,
                 {"the output projection's Partial products need g's all-reduce "
                  "(row_parallel_linear)",
                  "the forward needs one all-reduce, after the output projection: f before QKV "
                  "is the identity, and the heads need no all-gather (the row-parallel "
                  "projection sums their contributions)",
                  "g reduces the projection's output [s, b, h]"}));
      EXPECT_ON_RANK(checks, r,
                     issued("attention" + at(t, r), list, Phase::backward, 1, sbh,
                            {"is the backward all-reduce of f (before the QKV linear) missing?",
                             kGBackwardIsIdentity,
                             "f's backward reduces the gradient of the input x [s, b, h]"}));
    }
  }
}

// ---- task 3: predict, then measure -------------------------------------------------------------

// The framework's accounting of the attention block under tp: the attn.* terms of
// activation_model (parallel/models/memory_model.h, docs/derivations.md).
double framework_attention_bytes(LayerConfig c) {
  c.mode = ParallelMode::tp;
  double total = 0;
  for (const ActivationTerm& term : activation_model(c, false).terms) {
    if (term.scope.rfind("attn.", 0) == 0) total += term.bytes;
  }
  return total;
}

std::string bytes_text(double bytes) {
  std::ostringstream out;
  if (bytes == std::floor(bytes) && std::abs(bytes) < 1e15) {
    out << static_cast<long long>(bytes);
  } else {
    out << bytes;
  }
  return out.str();
}

std::string config_text(const LayerConfig& c) {
  std::ostringstream out;
  out << "s=" << c.seq << " b=" << c.batch << " h=" << c.hidden << " a=" << c.heads
      << " t=" << c.degree << " " << dtype_name(c.dtype) << " dropout=" << c.dropout;
  return out.str();
}

struct Variant {
  double bytes;
  std::string hint;
};

// The predictions that common mistakes give, each with what it means.
std::vector<Variant> mistaken_predictions(const LayerConfig& c) {
  const double s = static_cast<double>(c.seq), b = static_cast<double>(c.batch);
  const double sbh = s * b * static_cast<double>(c.hidden);
  const double as2b = static_cast<double>(c.heads) * s * s * b;
  const double t = static_cast<double>(c.degree);
  const double A = static_cast<double>(dtype_size(c.dtype)), M = 1;
  const bool drop = c.dropout > 0;
  // replicated + split / t, the right answer for (a, m, dropout)
  auto formula = [&](double a, double m, bool d) {
    return (a * sbh + (d ? m * sbh : 0.0)) +
           (4 * a * sbh + a * as2b + (d ? (m + a) * as2b : 0.0)) / t;
  };
  const double right = formula(A, M, drop);
  const double replicated = A * sbh + (drop ? M * sbh : 0.0);
  const double head_sbh = 4 * A * sbh, head_as2b = A * as2b + (drop ? (M + A) * as2b : 0.0);
  return {
      {(replicated + head_sbh + head_as2b) / t,
       "you divided everything by t: the QKV linear's input x (A sbh) and the output dropout's "
       "mask (M sbh) are whole on every rank (x is Replicate; the output is Replicate after the "
       "all-reduce)"},
      {replicated + head_sbh + head_as2b,
       "nothing is divided by t: each rank holds only its a/t heads, so Q, K, V, the projection's "
       "input and every [b, a/t, s, s] tensor are 1/t of the single-device ones"},
      {replicated + head_sbh / t + head_as2b,
       "the as^2b terms are split across ranks too: each rank holds the [b, a/t, s, s] "
       "probabilities (and mask) of its own heads only"},
      {replicated + head_sbh + head_as2b / t,
       "the sbh terms inside the heads are split too: Q, K, V and the projection's input are "
       "[.., h/t] on each rank"},
      {formula(2, M, drop),
       "A is the dtype's size in bytes, dtype_size(config.dtype): 4 for f32, 8 for f64 (the "
       "paper's A = 2 is fp16)"},
      {formula(c.dtype == DType::f64 ? 4 : 8, M, drop),
       "A is the dtype's size in bytes, dtype_size(config.dtype): 4 for f32, 8 for f64"},
      {formula(A, A, drop), "the dropout masks are u8: M = 1 byte per element, whatever the dtype"},
      {formula(A, M, true),
       "with dropout 0 nothing is dropped: no masks, no dropout output (dropout with p = 0 is the "
       "identity and saves nothing)"},
      {formula(A, M, false),
       "with dropout > 0, count the two masks (M as^2b/t and M sbh) and the dropout output that "
       "probs x V saves (A as^2b/t)"},
      {right + A * as2b / t,
       "one A as^2b/t too many: softmax saves its output, the scores before it are not saved "
       "(scale saves nothing); without dropout probs x V saves that same softmax output, and the "
       "ledger counts one storage once"},
      {right - A * as2b / t,
       "one A as^2b/t term is missing: the softmax output, and with dropout the dropout's output "
       "(the operand probs x V saves)"},
      {right - A * sbh,
       "the QKV linear's input is missing: its matmul saves x (A sbh) for the weight gradient"},
      {right - A * sbh + A * sbh / t,
       "the QKV linear's input is x itself, Replicate: A sbh on every rank, not A sbh/t (f's "
       "output shares x's storage)"},
      {right - M * sbh + M * sbh / t,
       "the output dropout runs after the all-reduce, on the Replicate output: its mask is "
       "M sbh on every rank, not M sbh/t"},
      {right - A * sbh / t,
       "one A sbh/t term is missing: Q and K (2A sbh/t, the scores' matmul), V (A sbh/t, probs x "
       "V) and the projection's input (A sbh/t)"},
      {right + A * sbh / t,
       "one A sbh/t term too many: Q and K (2A sbh/t), V (A sbh/t) and the projection's input "
       "(A sbh/t); the qkv output itself, the projection's output and the bias adds are not "
       "saved"},
      {right - M * sbh, "the output dropout's mask (M sbh) is missing"},
      {right * t,
       "your prediction is t x the answer: is a per-rank term multiplied by t instead of divided?"},
  };
}

bool same_bytes(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
}

// One configuration's prediction beside what it should be.
struct Prediction {
  LayerConfig config;
  double predicted = 0;
  double want = 0;
  std::string extra;  // appended to its line
};

std::string prediction_line(const Prediction& p, const char* want_name) {
  std::ostringstream m;
  m << "\n  " << config_text(p.config) << ": predicted " << bytes_text(p.predicted) << ", "
    << want_name << " " << bytes_text(p.want) << " (off by " << bytes_text(p.predicted - p.want)
    << ")" << p.extra;
  return m.str();
}

// The first common mistake that gives the prediction at every one of `wrong` (the shapes
// predicted wrong): one diagnosis for the whole table, never a coincidence at one shape; empty
// when none does.
std::string common_mistake(const std::vector<Prediction>& wrong) {
  if (wrong.empty()) return "";
  const std::size_t count = mistaken_predictions(wrong[0].config).size();
  for (std::size_t v = 0; v < count; ++v) {
    const bool explains_all = std::all_of(wrong.begin(), wrong.end(), [v](const Prediction& p) {
      return same_bytes(p.predicted, mistaken_predictions(p.config)[v].bytes);
    });
    if (explains_all) return mistaken_predictions(wrong[0].config)[v].hint;
  }
  return "";
}

LayerConfig shape(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a, int t,
                  DType dtype, double dropout) {
  LayerConfig c = test_config(t, dropout);
  c.seq = s;
  c.batch = b;
  c.hidden = h;
  c.heads = a;
  c.dtype = dtype;
  return c;
}

TEST(ActivationMemory, PredictionMatchesTheFrameworksAccounting) {
  const LayerConfig configs[] = {
      shape(6, 2, 16, 4, 1, DType::f64, 0.0),    shape(6, 2, 16, 4, 2, DType::f64, 0.1),
      shape(6, 2, 16, 4, 4, DType::f32, 0.1),    shape(6, 2, 16, 4, 4, DType::f32, 0.0),
      shape(5, 3, 32, 4, 2, DType::f32, 0.0),    shape(12, 2, 48, 12, 3, DType::f64, 0.1),
      shape(128, 4, 256, 8, 8, DType::f32, 0.1), shape(2048, 1, 4096, 32, 8, DType::f32, 0.1),
  };
  std::vector<Prediction> wrong;
  for (const LayerConfig& c : configs) {
    const Prediction p{c, predicted_attention_activation_bytes(c), framework_attention_bytes(c),
                       ""};
    if (!same_bytes(p.predicted, p.want)) wrong.push_back(p);
  }
  if (wrong.empty()) return;
  std::string lines;
  for (const Prediction& p : wrong) lines += prediction_line(p, "the framework counts");
  const std::string mistake = common_mistake(wrong);
  ADD_FAILURE() << "saved activation bytes per rank: your prediction differs from the "
                << "framework's accounting (parallel/models/memory_model.h) at " << wrong.size()
                << " of " << std::size(configs) << " shapes:" << lines << "\n"
                << (mistake.empty() ? "no single common mistake explains these; compare your "
                                      "terms one by one with the table in the README"
                                    : mistake);
}

// "attn.qkv/matmul 768, attn.scores/matmul 1536, ...": what the ledger saw, op by op.
std::string sites_text(const MemoryLedger& ledger) {
  std::ostringstream out;
  bool first = true;
  for (const MemoryLedger::SavedSite& site : ledger.saved_by_site()) {
    if (site.role != SaveRole::activation) continue;
    out << (first ? "" : ", ") << (site.scope.empty() ? "(no scope)" : site.scope) << "/" << site.op
        << " " << site.bytes;
    first = false;
  }
  return first ? "nothing" : out.str();
}

TEST(ActivationMemory, PredictionMatchesTheMeasurementOfYourAttention) {
  struct Case {
    std::int64_t s, b, h, a;
    DType dtype;
    double dropout;
  };
  const Case cases[] = {{6, 2, 16, 4, DType::f64, 0.0},
                        {6, 2, 16, 4, DType::f64, 0.1},
                        {8, 1, 24, 8, DType::f32, 0.1},
                        {5, 3, 32, 4, DType::f32, 0.0}};
  std::vector<Prediction> wrong;
  std::size_t runs = 0;
  bool attention_differs = false, prediction_is_framework = true;
  for (const Case& k : cases) {
    for (int t : kDegrees) {
      const LayerConfig c = shape(k.s, k.b, k.h, k.a, t, k.dtype, k.dropout);
      const std::vector<RankResult> ranks = run_ranks(t, [&c](RankEnv& env, RankResult& out) {
        const AttentionWeights shards = reference_shards(env.group, full_weights(env.ctx, c));
        Tensor x = Tensor::randn(env.ctx, input_shape(c), kSeedX, 1.0, c.dtype);
        x.set_requires_grad(true);
        MemoryLedger ledger;
        ObserverGuard guard(env.ctx, ledger);
        const ParallelTensor y = parallel_attention(
            env.group, c, ParallelTensor{x, Placement::replicate(), input_shape(c)}, shards);
        out.numbers["saved"] = static_cast<double>(ledger.saved_activation_bytes());
        out.texts["sites"] = sites_text(ledger);
      });
      ++runs;
      for (const RankResult& res : ranks) {
        EXPECT_EQ(res.numbers.at("saved"), ranks[0].numbers.at("saved"))
            << config_text(c) << ": the ranks of your attention save different bytes ("
            << res.texts.at("sites") << " against rank 0's " << ranks[0].texts.at("sites") << ")";
      }
      const double framework = framework_attention_bytes(c);
      const Prediction p{c, predicted_attention_activation_bytes(c), ranks[0].numbers.at("saved"),
                         "; the ledger, op by op: " + ranks[0].texts.at("sites")};
      if (same_bytes(p.predicted, p.want)) continue;
      wrong.push_back(p);
      attention_differs = attention_differs || !same_bytes(p.want, framework);
      prediction_is_framework = prediction_is_framework && same_bytes(p.predicted, framework);
    }
  }
  if (wrong.empty()) return;
  std::string lines;
  for (const Prediction& p : wrong) lines += prediction_line(p, "measured");
  std::string diagnosis;
  if (!attention_differs) {
    diagnosis = common_mistake(wrong);
    if (diagnosis.empty()) {
      diagnosis =
          "no single common mistake explains these; compare your terms one by one with "
          "the ledger's";
    }
  } else if (prediction_is_framework) {
    diagnosis =
        "your predictions equal the framework's accounting, so your attention saves "
        "something the framework's does not (or misses something): compare the ledger's "
        "lines with the table in the README";
  } else {
    diagnosis =
        "your attention does not save what the framework's TP attention saves "
        "(framework_attention_bytes): make the ParallelAttention tests pass first, then "
        "compare your terms with the ledger's";
  }
  ADD_FAILURE() << "saved activation bytes per rank: your prediction differs from the "
                << "MemoryLedger's measurement of your parallel_attention after its forward at "
                << wrong.size() << " of " << runs << " runs:" << lines << "\n"
                << diagnosis;
}

#ifdef SHARDSCOPE_LAB_GRADER_TESTS
// ---- the graders' own tests (the instructor's tree only) ----------------------------------------
// Planted student mistakes, judged by the helper the lab's test uses: the hint must name each.

// The planted parallel_attention (dropout 0): the solution's steps with one of the mistakes.
ParallelTensor planted_attention(ProcessGroup& group, const LayerConfig& c, const ParallelTensor& x,
                                 const AttentionWeights& w, MathBug bug) {
  const std::int64_t s = c.seq, b = c.batch, heads = c.heads / group.size(), d = c.head_dim();
  const Tensor qkv = column_parallel_linear(group, x, w.qkv_weight, w.qkv_bias, {}).local;
  const std::vector<Tensor> parts =
      bug == MathBug::qkv_blocks  // [s, b, 3, heads, d]: the [q | k | v] reading
          ? chunk(permute(reshape(qkv, {s, b, 3, heads, d}), {2, 1, 3, 0, 4}), 0, 3)
          : chunk(permute(reshape(qkv, {s, b, heads, 3, d}), {3, 1, 2, 0, 4}), 0, 3);
  const Tensor q = reshape(parts[0], {b, heads, s, d}), k = reshape(parts[1], {b, heads, s, d});
  const Tensor v = reshape(parts[2], {b, heads, s, d});
  const double width = static_cast<double>(bug == MathBug::scale_by_h ? c.hidden : d);
  const Tensor probs = softmax(scale(matmul(q, k, true), 1.0 / std::sqrt(width)), c.causal);
  const std::vector<int> merge =
      bug == MathBug::merge_d_major ? std::vector<int>{2, 0, 3, 1} : std::vector<int>{2, 0, 1, 3};
  const Tensor context = reshape(permute(matmul(probs, v), merge), {s, b, heads * d});
  return row_parallel_linear(
      group, ParallelTensor::make(context, Placement::shard(2), input_shape(c), group.size()),
      w.proj_weight, w.proj_bias, {});
}

// The planted mistake's message at t = 1 and t = 2 (rank 0 of each).
std::vector<std::string> planted_messages(MathBug bug) {
  std::vector<std::string> messages;
  bool wrong_at_one_rank = false;
  for (int t : {1, 2}) {
    const LayerConfig c = test_config(t, 0.0);
    Context ctx;
    const AttentionReference ref = reference_run(ctx, c);
    const std::vector<RankResult> ranks = run_ranks(t, [&c, bug](RankEnv& env, RankResult& out) {
      const AttentionWeights shards = reference_shards(env.group, full_weights(env.ctx, c));
      const Tensor x = leaf(env.ctx, input_shape(c), kSeedX);
      out.keep("y", planted_attention(env.group, c,
                                      ParallelTensor{x, Placement::replicate(), input_shape(c)},
                                      shards, bug)
                        .local);
    });
    NoGradGuard no_grad(ctx);
    const ::testing::AssertionResult r =
        judge_forward(c, ref, t, 0, ranks[0]["y"], wrong_at_one_rank);
    wrong_at_one_rank = wrong_at_one_rank || !r;
    messages.push_back(r ? "(passes)" : r.message());
  }
  return messages;
}

void expect_named(MathBug bug, const std::string& hint) {
  const std::vector<std::string> m = planted_messages(bug);
  EXPECT_THAT(m[0], ::testing::HasSubstr(hint));
  EXPECT_THAT(m[0], ::testing::HasSubstr("at t = 1 (one rank, no communication)"));
  EXPECT_THAT(m[1], ::testing::HasSubstr(hint));
  EXPECT_THAT(m[1], ::testing::HasSubstr(kWrongAtOneRank));
}

TEST(GraderHints, ScoresScaledByOneOverSqrtHAreNamed) {
  expect_named(MathBug::scale_by_h, "the scores are scaled by 1/sqrt(h):");
}

TEST(GraderHints, AQkvSplitInBlocksIsNamed) {
  expect_named(MathBug::qkv_blocks, "your q, k and v are [q | k | v] blocks of the local qkv");
}

TEST(GraderHints, HeadsMergedDimensionMajorAreNamed) {
  expect_named(MathBug::merge_d_major, "the heads are merged as [s, b, d, a/t]");
}
#endif

}  // namespace
}  // namespace shardscope::labs
