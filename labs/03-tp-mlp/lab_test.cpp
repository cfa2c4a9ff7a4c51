// Lab 3's tests: f and g, the column- and row-parallel linears and the MLP against the
// single-device MLP built from the framework's ops, at t = 1, 2 and 4 in f64 (ranks as threads);
// and the collectives each one issues. A failure names the likely mistake when the result stands
// in a recognisable relation to the right one (a factor of t, a partial sum, a bias counted t
// times, a transposed slice).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "labs/03-tp-mlp/lab.h"
#include "labs/common/rank_testing.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/collective_ops.h"

namespace shardscope::labs {
namespace {

constexpr int kDegrees[] = {1, 2, 4};
// s, b, h and the MLP's inner size f = 4h: small, and every size divides by t = 4.
constexpr std::int64_t kS = 3, kB = 2, kH = 8, kF = 4 * kH;
const Shape kInputShape{kS, kB, kH};  // [s, b, h]
const Shape kInnerShape{kS, kB, kF};  // [s, b, f]
const char* const kReplicated = "Replicate of [3, 2, 8], local [3, 2, 8]";

// The seeds of the test data: every rank makes the same full tensors from them.
enum Seed : std::uint64_t {
  kSeedX = 101,
  kSeedFc1W = 111,
  kSeedFc1B,
  kSeedFc2W,
  kSeedFc2B,
  kSeedDyOut = 201,    // an upstream gradient [s, b, h]
  kSeedDyInner = 202,  // an upstream gradient [s, b, f]
  kSeedInner = 301,    // an input of fc2 [s, b, f]
  kSeedPerRank = 400,  // + rank: tensors that differ between ranks
};

// ---- the data and the single-device reference --------------------------------------------------

MlpWeights full_weights(Context& ctx) {
  auto param = [&](const Shape& shape, std::uint64_t seed, const char* name) {
    return Tensor::parameter(Tensor::randn(ctx, shape, seed, 0.5, DType::f64), name);
  };
  return {param({kH, kF}, kSeedFc1W, "mlp.fc1.weight"), param({kF}, kSeedFc1B, "mlp.fc1.bias"),
          param({kF, kH}, kSeedFc2W, "mlp.fc2.weight"), param({kH}, kSeedFc2B, "mlp.fc2.bias")};
}

// The shards as the framework slices them (parallel_layer.cpp's tp placements), as parameters.
Placement placement_of(const std::string& name) {
  if (name == "fc1.weight") return Placement::shard(1);
  if (name == "fc1.bias" || name == "fc2.weight") return Placement::shard(0);
  return Placement::replicate();
}

MlpWeights reference_shards(ProcessGroup& group, const MlpWeights& full) {
  auto shard = [&](const Tensor& w, const char* name) {
    return shard_parameter(group, w, placement_of(name), name);
  };
  return {shard(full.fc1_weight, "fc1.weight"), shard(full.fc1_bias, "fc1.bias"),
          shard(full.fc2_weight, "fc2.weight"), shard(full.fc2_bias, "fc2.bias")};
}

std::vector<std::pair<std::string, Tensor>> named(const MlpWeights& w) {
  return {{"fc1.weight", w.fc1_weight},
          {"fc1.bias", w.fc1_bias},
          {"fc2.weight", w.fc2_weight},
          {"fc2.bias", w.fc2_bias}};
}

// The single-device MLP: gelu(x W1 + b1) W2 + b2, from the framework's ops.
Tensor reference_mlp(const Tensor& x, const MlpWeights& w) {
  return add(matmul(gelu(add(matmul(x, w.fc1_weight), w.fc1_bias)), w.fc2_weight), w.fc2_bias);
}

Values slice_values(Context& ctx, const Values& full, Placement placement, int rank, int t) {
  return values_of(slice_of_full(tensor_of(ctx, full), placement, rank, t));
}

const char* const kNoGradient =
    "no gradient arrived: is the tensor used through autograd ops (not detached), and does your "
    "op's backward return a gradient for it?";
const char* const kFBackwardMissing =
    "x.grad is this rank's partial term (summed over the ranks it is right): is the backward "
    "all-reduce of f missing?";

// ---- task 1: f ---------------------------------------------------------------------------------

TEST(FOperator, ForwardIsTheIdentity) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = leaf(env.ctx, kInputShape, kSeedX);
      const ParallelTensor y =
          f_copy_to_tp(env.group, ParallelTensor{x, Placement::replicate(), kInputShape});
      out.keep("x", x);
      out.keep("y", y.local);
      out.placement = y.str();
    });
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(
          checks, r,
          judge("f's output" + at(t, r), res["y"], res["x"], t,
                Hints().if_times_t("f's forward must be the identity: an all-reduce of a Replicate "
                                   "tensor multiplies it by t")));
      EXPECT_ON_RANK(checks, r,
                     placement_is("f's output" + at(t, r), res.placement, kReplicated,
                                  "f keeps x's placement and global shape"));
      EXPECT_ON_RANK(checks, r,
                     issued("f" + at(t, r), res.collectives, Phase::forward, 0, 0,
                            {"", "f's forward is the identity: it communicates nothing", ""}));
    }
  }
}

TEST(FOperator, BackwardAllReducesTheGradient) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = leaf(env.ctx, kInputShape, kSeedX);
      const ParallelTensor y =
          f_copy_to_tp(env.group, ParallelTensor{x, Placement::replicate(), kInputShape});
      // Downstream of f the ranks compute different things: each sends back its own gradient.
      const Tensor dy =
          Tensor::randn(env.ctx, kInputShape, kSeedPerRank + env.rank, 1.0, DType::f64);
      y.local.backward(dy);
      out.keep("dy", dy);
      out.keep("x.grad", x.grad());
    });
    const Values want = sum_of(per_rank(ranks, "dy"));
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r,
                     judge("x.grad through f" + at(t, r), res["x.grad"], want, t,
                           Hints().otherwise("x.grad must be the sum over ranks of the gradients "
                                             "arriving at f's output"),
                           {{res["dy"],
                             "x.grad is this rank's own gradient: is the backward all-reduce of f "
                             "missing?"}},
                           kNoGradient));
      EXPECT_ON_RANK(checks, r,
                     issued("f" + at(t, r), res.collectives, Phase::backward, 1, kS * kB * kH,
                            {"is the backward all-reduce of f missing?",
                             "f's backward all-reduces the gradient once",
                             "f's backward all-reduces the gradient of x, [s, b, h]"}));
      EXPECT_ON_RANK(checks, r, written_by_hand("f" + at(t, r), res.collectives));
    }
  }
}

// ---- task 2: g ---------------------------------------------------------------------------------

// g's output on rank r against the sum of the ranks' inputs (`own` is this rank's input).
::testing::AssertionResult judge_g_output(int t, int r, const Values& got, const Values& want,
                                          const Values& own) {
  return judge("g's output" + at(t, r), got, want, t,
               Hints()
                   .if_times_t("the partial sums were all-reduced twice")
                   .if_over_t("g must sum the partial outputs: you averaged them (divided by t)"),
               {{own,
                 "g's output is this rank's own partial term: g's forward must all-reduce (sum) "
                 "the ranks' tensors"}});
}

TEST(GOperator, ForwardAllReducesThePartialSums) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = leaf(env.ctx, kInputShape, kSeedPerRank + env.rank);
      out.keep("x", x);  // a copy of the values before g
      const ParallelTensor y =
          g_reduce_from_tp(env.group, ParallelTensor{x, Placement::partial(), kInputShape});
      out.keep("x.after", x);
      out.keep("y", y.local);
      out.placement = y.str();
    });
    const Values want = sum_of(per_rank(ranks, "x"));
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r, judge_g_output(t, r, res["y"], want, res["x"]));
      EXPECT_ON_RANK(checks, r,
                     judge("g's input x after g" + at(t, r), res["x.after"], res["x"], t,
                           Hints().otherwise("g changed its input in place: all-reduce a clone "
                                             "(inputs[0].clone()), never the input itself")));
      EXPECT_ON_RANK(checks, r,
                     placement_is("g's output" + at(t, r), res.placement, kReplicated,
                                  "g turns a Partial into a Replicate of the same global shape"));
      EXPECT_ON_RANK(checks, r,
                     issued("g" + at(t, r), res.collectives, Phase::forward, 1, kS * kB * kH,
                            {"g's forward must all-reduce the partial sums",
                             "g's forward all-reduces once", "g all-reduces x, [s, b, h]"}));
      EXPECT_ON_RANK(checks, r, written_by_hand("g" + at(t, r), res.collectives));
    }
  }
}

TEST(GOperator, BackwardIsTheIdentity) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, [](RankEnv& env, RankResult& out) {
      const Tensor x = leaf(env.ctx, kInputShape, kSeedPerRank + env.rank);
      const ParallelTensor y =
          g_reduce_from_tp(env.group, ParallelTensor{x, Placement::partial(), kInputShape});
      // Downstream of g every rank computes the same thing: the same gradient on every rank.
      const Tensor dy = Tensor::randn(env.ctx, kInputShape, kSeedDyOut, 1.0, DType::f64);
      y.local.backward(dy);
      out.keep("dy", dy);
      out.keep("x.grad", x.grad());
    });
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r,
                     judge("x.grad through g" + at(t, r), res["x.grad"], res["dy"], t,
                           Hints().if_times_t(kGBackwardIsIdentity), {}, kNoGradient));
      EXPECT_ON_RANK(checks, r,
                     issued("g" + at(t, r), res.collectives, Phase::backward, 0, 0,
                            {"", kGBackwardIsIdentity, ""}));
    }
  }
}

// ---- task 3: the shards ------------------------------------------------------------------------

TEST(ShardMlpWeights, AreThisRanksSlicesOfTheFullWeights) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, [](RankEnv& env, RankResult& out) {
      const MlpWeights full = full_weights(env.ctx);
      const MlpWeights mine = shard_mlp_weights(env.group, full);
      const auto want = named(reference_shards(env.group, full));
      const auto got = named(mine);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const std::string& name = got[i].first;
        keep_shard(env, out, name, got[i].second, want[i].second);
        // The other way to cut it: columns for rows, a slice for the whole, the whole for a slice.
        const Tensor w = named(full)[i].second;
        const Placement other =
            w.rank() == 2
                ? Placement::shard(1 - placement_of(name).dim)
                : (placement_of(name).is_shard() ? Placement::replicate() : Placement::shard(0));
        out.keep(name + ".other", slice_of_full(w, other, env.rank, env.world));
      }
    });
    expect_shards(
        ranks, t,
        {{"fc1.weight",
          {{"fc1.weight.other",
            "fc1 is column parallel: its weight [h, f] is split on the output "
            "dim (columns, dim 1)"}}},
         {"fc1.bias",
          {{"fc1.bias.other", "fc1's bias is split like fc1's columns: rank r holds [f/t]"}}},
         {"fc2.weight",
          {{"fc2.weight.other",
            "fc2 is row parallel: its weight [f, h] is split on the input dim (rows, dim 0), the "
            "same f/t features fc1 gave this rank"}}},
         {"fc2.bias",
          {{"fc2.bias.other",
            "fc2's bias is not split: every rank holds all of [h] and adds it once, after g"}}}});
  }
}

// ---- task 4: the column-parallel linear --------------------------------------------------------

// fc1 and fc2 of the MLP, each tested as a linear on its own: its input and the upstream gradient,
// each a full tensor of the test data and how it is split over the ranks.
struct LinearData {
  Shape shape;
  std::uint64_t seed;
  Placement placement;
};
struct LinearCase {
  const char* name;  // "fc1" (column_parallel_linear) or "fc2" (row_parallel_linear)
  LinearData x, dy;
};

// fc1: x Replicate [s, b, h] -> Shard(2) [s, b, f]. The loss is sum(Y * dY) over the full output:
// rank r's columns get dY's columns.
const LinearCase kFc1{"fc1",
                      {kInputShape, kSeedX, Placement::replicate()},
                      {kInnerShape, kSeedDyInner, Placement::shard(2)}};
// fc2: x Shard(2) [s, b, f] -> Replicate [s, b, h]. Downstream of the row-parallel linear every
// rank computes the same: the same dY everywhere.
const LinearCase kFc2{"fc2",
                      {kInnerShape, kSeedInner, Placement::shard(2)},
                      {kInputShape, kSeedDyOut, Placement::replicate()}};

struct LinearReference {
  Values y, x_grad, w_grad, b_grad, x, w, b, dy;
};

// y = x W + b on one device, and its gradients for the upstream gradient dy.
LinearReference reference_linear(Context& ctx, const LinearCase& c) {
  const bool column = std::string(c.name) == "fc1";
  const MlpWeights full = full_weights(ctx);
  const Tensor x = leaf(ctx, c.x.shape, c.x.seed);
  const Tensor w = Tensor::parameter(column ? full.fc1_weight : full.fc2_weight, "w");
  const Tensor b = Tensor::parameter(column ? full.fc1_bias : full.fc2_bias, "b");
  const Tensor y = add(matmul(x, w), b);
  const Tensor dy = Tensor::randn(ctx, c.dy.shape, c.dy.seed, 1.0, DType::f64);
  y.backward(dy);
  return {values_of(y), values_of(x.grad()), values_of(w.grad()), values_of(b.grad()),
          values_of(x), values_of(w),        values_of(b),        values_of(dy)};
}

// Each rank: its part of x through the student's linear with this rank's shards; with `backward`,
// backward from its part of dY, keeping the gradients of x, the weight and the bias.
RankBody linear_body(const LinearCase& c, bool backward) {
  return [c, backward](RankEnv& env, RankResult& out) {
    const bool column = std::string(c.name) == "fc1";
    const MlpWeights shards = reference_shards(env.group, full_weights(env.ctx));
    const Tensor& w = column ? shards.fc1_weight : shards.fc2_weight;
    const Tensor& b = column ? shards.fc1_bias : shards.fc2_bias;
    const Tensor x_full = Tensor::randn(env.ctx, c.x.shape, c.x.seed, 1.0, DType::f64);
    const Tensor x = leaf(slice_of_full(x_full, c.x.placement, env.rank, env.world));
    const ParallelTensor in{x, c.x.placement, c.x.shape};
    const ParallelTensor y = column ? column_parallel_linear(env.group, in, w, b)
                                    : row_parallel_linear(env.group, in, w, b);
    out.keep("y", y.local);
    out.placement = y.str();
    if (!backward) return;
    const Tensor dy_full = Tensor::randn(env.ctx, c.dy.shape, c.dy.seed, 1.0, DType::f64);
    y.local.backward(slice_of_full(dy_full, c.dy.placement, env.rank, env.world));
    out.keep("x.grad", x.grad());
    out.keep(std::string(c.name) + ".weight.grad", w.grad());
    out.keep(std::string(c.name) + ".bias.grad", b.grad());
  };
}

TEST(ColumnParallelLinear, ForwardIsThisRanksColumnsOfTheFullLinear) {
  Context ref;
  const LinearReference want = reference_linear(ref, kFc1);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, linear_body(kFc1, false));
    RankChecks checks;
    // What f's forward gives if it all-reduces x: (t x) W + b.
    const Values times_x = plus_times(plus_times(want.y, want.y, t - 1.0), want.b, 1.0 - t);
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r,
                     judge("column-parallel output" + at(t, r), res["y"],
                           slice_values(ref, want.y, Placement::shard(2), r, t), t,
                           Hints().otherwise("rank r's output is columns r f/t .. (r+1) f/t of the "
                                             "full x W + b: x (after f) times this rank's weight "
                                             "shard, plus its bias shard"),
                           {{slice_values(ref, times_x, Placement::shard(2), r, t),
                             "the output is (t x) W + b: f's forward must be the identity (an "
                             "all-reduce of the Replicate x multiplies it by t)"}}));
      const std::string global = "Shard(2) of [3, 2, 32], local [3, 2, " + std::to_string(kF / t);
      EXPECT_ON_RANK(checks, r,
                     placement_is("column-parallel output" + at(t, r), res.placement, global + "]",
                                  "Shard(last dim), with the full output width in its global "
                                  "shape"));
      EXPECT_ON_RANK(
          checks, r,
          issued("column-parallel linear" + at(t, r), res.collectives, Phase::forward, 0, 0,
                 {"", "the column-parallel linear communicates nothing in forward", ""}));
    }
  }
}

TEST(ColumnParallelLinear, GradientsMatchTheFullLinear) {
  Context ref;
  const LinearReference want = reference_linear(ref, kFc1);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, linear_body(kFc1, true));
    const std::vector<Values> x_grads = per_rank(ranks, "x.grad");
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(
          checks, r,
          judge("x.grad of the column-parallel linear" + at(t, r), res["x.grad"], want.x_grad, t,
                Hints(), {{missing_reduction(x_grads, want.x_grad, r), kFBackwardMissing}},
                kNoGradient));
      EXPECT_ON_RANK(checks, r,
                     issued("column-parallel linear" + at(t, r), res.collectives, Phase::backward,
                            1, kS * kB * kH,
                            {"is the backward all-reduce of f missing?",
                             "the backward of the column-parallel linear all-reduces once (f's)",
                             "f all-reduces the gradient of the linear's input [s, b, h]"}));
    }
    EXPECT_TRUE(
        judge("fc1.weight gradient (gathered, t = " + std::to_string(t) + ")",
              gathered(ref, ranks, "fc1.weight.grad", Placement::shard(1)), want.w_grad, t,
              Hints().if_times_t("the weight saw t times x: f's forward must be the identity"), {},
              kNoGradient));
    EXPECT_TRUE(judge("fc1.bias gradient (gathered, t = " + std::to_string(t) + ")",
                      gathered(ref, ranks, "fc1.bias.grad", Placement::shard(0)), want.b_grad, t,
                      Hints(), {}, kNoGradient));
  }
}

// ---- task 5: the row-parallel linear -----------------------------------------------------------

TEST(RowParallelLinear, ForwardMatchesTheFullLinear) {
  Context ref;
  const LinearReference want = reference_linear(ref, kFc2);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, linear_body(kFc2, false));
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      // This rank's term x_r W_r of the sum, computed on one device.
      const Tensor partial =
          matmul(slice_of_full(tensor_of(ref, want.x), Placement::shard(2), r, t),
                 slice_of_full(tensor_of(ref, want.w), Placement::shard(0), r, t));
      const std::vector<Suspect> suspects = {
          {plus_times(want.y, want.b, t - 1.0),
           "output = want + (t - 1) x bias: is the bias added on every rank before the "
           "all-reduce? Add it once, after g"},
          {plus_times(want.y, want.b, t),
           "output = want + t x bias: the bias is added on every rank before g and again after "
           "it; add it once, after g"},
          {plus_times(values_of(partial), want.b, 1.0),
           "the output is this rank's partial x_r W_r + b: is g's all-reduce missing?"},
          {values_of(partial),
           "the output is this rank's partial x_r W_r: g and the bias are "
           "missing"}};
      EXPECT_ON_RANK(
          checks, r,
          judge("row-parallel output" + at(t, r), res["y"], want.y, t,
                Hints().if_times_t("is the bias added on every rank before the all-reduce, or the "
                                   "result all-reduced twice?"),
                suspects));
      EXPECT_ON_RANK(checks, r,
                     placement_is("row-parallel output" + at(t, r), res.placement, kReplicated,
                                  "after g the output is Replicate"));
      EXPECT_ON_RANK(
          checks, r,
          issued("row-parallel linear" + at(t, r), res.collectives, Phase::forward, 1, kS * kB * kH,
                 {"is g's all-reduce missing?", "g all-reduces once",
                  "g all-reduces the output x W, [s, b, h]"}));
    }
  }
}

TEST(RowParallelLinear, GradientsMatchTheFullLinear) {
  Context ref;
  const LinearReference want = reference_linear(ref, kFc2);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_ranks(t, linear_body(kFc2, true));
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      EXPECT_ON_RANK(checks, r,
                     judge("x.grad of the row-parallel linear" + at(t, r), res["x.grad"],
                           slice_values(ref, want.x_grad, Placement::shard(2), r, t), t,
                           Hints().if_times_t(kGBackwardIsIdentity), {}, kNoGradient));
      EXPECT_ON_RANK(checks, r,
                     judge("fc2.bias gradient" + at(t, r), res["fc2.bias.grad"], want.b_grad, t,
                           Hints().if_times_t(kGBackwardIsIdentity), {}, kNoGradient));
      EXPECT_ON_RANK(checks, r,
                     issued("row-parallel linear" + at(t, r), res.collectives, Phase::backward, 0,
                            0, {"", kGBackwardIsIdentity, ""}));
    }
    EXPECT_TRUE(judge("fc2.weight gradient (gathered, t = " + std::to_string(t) + ")",
                      gathered(ref, ranks, "fc2.weight.grad", Placement::shard(0)), want.w_grad, t,
                      Hints().if_times_t(kGBackwardIsIdentity), {}, kNoGradient));
  }
}

// ---- task 6: the MLP ---------------------------------------------------------------------------

struct MlpReference {
  Values y, x_grad;
  std::map<std::string, Values> grads;  // "fc1.weight", ...
  MlpWeights full;
  Tensor x;
};

MlpReference reference_run(Context& ctx) {
  MlpReference ref;
  ref.full = full_weights(ctx);
  ref.x = leaf(ctx, kInputShape, kSeedX);
  const Tensor y = reference_mlp(ref.x, ref.full);
  y.backward(Tensor::randn(ctx, kInputShape, kSeedDyOut, 1.0, DType::f64));
  ref.y = values_of(y);
  ref.x_grad = values_of(ref.x.grad());
  for (const auto& [name, w] : named(ref.full)) ref.grads[name] = values_of(w.grad());
  return ref;
}

std::vector<RankResult> run_mlp(int t) {
  return run_ranks(t, [](RankEnv& env, RankResult& out) {
    const MlpWeights shards = reference_shards(env.group, full_weights(env.ctx));
    const Tensor x = leaf(env.ctx, kInputShape, kSeedX);
    const ParallelTensor y =
        parallel_mlp(env.group, ParallelTensor{x, Placement::replicate(), kInputShape}, shards);
    out.keep("y", y.local);
    out.placement = y.str();
    y.local.backward(Tensor::randn(env.ctx, kInputShape, kSeedDyOut, 1.0, DType::f64));
    out.keep("x.grad", x.grad());
    for (const auto& [name, w] : named(shards)) out.keep(name + ".grad", w.grad());
  });
}

TEST(ParallelMlp, ForwardMatchesTheSingleDeviceMlp) {
  Context ctx;
  const MlpReference ref = reference_run(ctx);
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_mlp(t);
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      NoGradGuard no_grad(ctx);
      // This rank's term of fc2's output: gelu(x W1_r + b1_r) W2_r.
      auto slice = [&](const Tensor& w, const char* name) {
        return slice_of_full(w, placement_of(name), r, t);
      };
      const Tensor partial =
          matmul(gelu(add(matmul(ref.x, slice(ref.full.fc1_weight, "fc1.weight")),
                          slice(ref.full.fc1_bias, "fc1.bias"))),
                 slice(ref.full.fc2_weight, "fc2.weight"));
      const Values b2 = values_of(ref.full.fc2_bias);
      const std::vector<Suspect> suspects = {
          {plus_times(ref.y, b2, t - 1.0),
           "output = want + (t - 1) x fc2's bias: is the bias added on every rank before the "
           "all-reduce? Add it once, after g"},
          {plus_times(ref.y, b2, t),
           "output = want + t x fc2's bias: the bias is added on every rank before g and again "
           "after it; add it once, after g"},
          {plus_times(values_of(partial), b2, 1.0),
           "the output is this rank's partial term: is g's all-reduce missing?"}};
      EXPECT_ON_RANK(checks, r,
                     judge("MLP output" + at(t, r), res["y"], ref.y, t,
                           Hints()
                               .if_times_t("is the bias added on every rank before the "
                                           "all-reduce, or the output all-reduced twice?")
                               .otherwise("if the linears' tests pass, check parallel_mlp: fc1 "
                                          "(column parallel) -> gelu on the local columns -> fc2 "
                                          "(row parallel), with the shards it is given"),
                           suspects));
      EXPECT_ON_RANK(checks, r,
                     placement_is("MLP output" + at(t, r), res.placement, kReplicated,
                                  "the MLP's output is Replicate, like its input"));
    }
  }
}

TEST(ParallelMlp, InputGradientMatchesTheSingleDeviceMlp) {
  Context ctx;
  const MlpReference ref = reference_run(ctx);
  for (int t : kDegrees) {
    expect_input_gradient("MLP input gradient", run_mlp(t), ref.x_grad, t, kFBackwardMissing,
                          kNoGradient);
  }
}

TEST(ParallelMlp, WeightGradientsMatchTheSingleDeviceMlp) {
  Context ctx;
  const MlpReference ref = reference_run(ctx);
  for (int t : kDegrees) {
    expect_weight_gradients(ctx, run_mlp(t), t, ref.grads, placement_of, kNoGradient);
  }
}

TEST(ParallelMlp, IssuesOneAllReduceInForwardAndOneInBackward) {
  for (int t : kDegrees) {
    const std::vector<RankResult> ranks = run_mlp(t);
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const std::vector<Collective>& c = ranks[static_cast<std::size_t>(r)].collectives;
      EXPECT_ON_RANK(
          checks, r,
          issued("MLP" + at(t, r), c, Phase::forward, 1, kS * kB * kH,
                 {"g (after fc2) must all-reduce fc2's partial output",
                  "the forward needs one all-reduce, g's: f's forward is the identity and "
                  "the GeLU works on the local columns",
                  "g reduces fc2's output [s, b, h], not fc1's [s, b, f/t]"}));
      EXPECT_ON_RANK(checks, r,
                     issued("MLP" + at(t, r), c, Phase::backward, 1, kS * kB * kH,
                            {"is the backward all-reduce of f missing?", kGBackwardIsIdentity,
                             "f's backward reduces the gradient of the MLP's input [s, b, h]"}));
    }
  }
}

#ifdef SHARDSCOPE_LAB_GRADER_TESTS
// ---- the graders' own tests (the instructor's tree only) ----------------------------------------
// A planted student mistake, judged by the helper the lab's test uses: the hint must name it.

TEST(GraderHints, GThatAveragesIsNamed) {
  constexpr int t = 2;
  const std::vector<RankResult> ranks = run_ranks(t, [](RankEnv& env, RankResult& out) {
    const Tensor x = leaf(env.ctx, kInputShape, kSeedPerRank + env.rank);
    out.keep("x", x);
    Tensor y = x.clone();  // the planted g: the sum over ranks, then 1/t
    env.group.all_reduce(y, ReduceOp::sum);
    out.keep("y", scale(y, 1.0 / env.group.size()));
  });
  const Values want = sum_of(per_rank(ranks, "x"));
  const ::testing::AssertionResult r = judge_g_output(t, 0, ranks[0]["y"], want, ranks[0]["x"]);
  ASSERT_FALSE(r);
  EXPECT_THAT(r.message(), ::testing::HasSubstr("g must sum the partial outputs: you averaged them "
                                                "(divided by t)"));
}
#endif

}  // namespace
}  // namespace shardscope::labs
