// The collective autograd ops: each backward checked by central finite differences through the
// parallel graph (every rank perturbs in turn; the loss is the sum of every rank's local loss),
// and placement checks that name the op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "autograd/ops.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/parallel_linear.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using OpFn = std::function<ParallelTensor(ProcessGroup&, const ParallelTensor&)>;

// f64 central differences of a smooth function: errors near 1e-9 against O(1) for a wrong
// backward.
constexpr double kEps = 1e-6;
constexpr double kTol = 1e-7;

// How the ranks' losses combine downstream of the op. `summed`: the ranks compute different
// things downstream (a column-parallel linear after gather_seq or copy_to_tp), so the loss is the
// sum over ranks of sum(y_r * w_r). `replicated`: downstream is the same computation on every
// rank (after reduce_from_tp or gather_last), so there is one loss, sum(y * w), with the same w.
enum class Downstream { summed, replicated };

double global_loss(ProcessGroup& g, const Tensor& y, const Tensor& w, Downstream downstream) {
  NoGradGuard no_grad(g.ctx());
  Tensor local = Tensor::full(g.ctx(), {1}, sum(mul(y, w)).item(), DType::f64);
  if (downstream == Downstream::summed) g.all_reduce(local, ReduceOp::sum, CommPurpose::check);
  return local.item();
}

// Runs on every rank: the analytic gradient of the global loss from one backward against central
// differences, every rank perturbing its elements in turn while the others recompute. A
// Replicate input is one logical tensor held by every rank: all ranks hold the same values and
// perturb them together.
void check_op(const char* name, const OpFn& op, Placement in, const Shape& global, int t,
              Downstream downstream = Downstream::summed) {
  const bool replicated = in == Placement::replicate();
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(10000);
  run_spmd(t, options, [&](RankEnv& env) {
    Context& ctx = env.ctx;
    const Shape local = local_shape(global, in, t);
    Tensor x = Tensor::randn(ctx, local, replicated ? 100 : 100 + env.rank, 1.0, DType::f64);
    x.set_requires_grad(true);
    ParallelTensor px{x, in, global};
    ParallelTensor y = op(env.group, px);
    const std::uint64_t w_seed = downstream == Downstream::replicated ? 200 : 200 + env.rank;
    Tensor w = Tensor::randn(ctx, y.local.shape(), w_seed, 1.0, DType::f64);
    y.local.backward(w);
    const std::vector<double> analytic = x.grad().to_vector();
    for (int owner = 0; owner < (replicated ? 1 : t); ++owner) {
      const bool mine = replicated || env.rank == owner;
      const std::int64_t n = x.numel();
      for (std::int64_t i = 0; i < n; ++i) {
        double loss[2];
        for (int side = 0; side < 2; ++side) {
          const double delta = side ? -kEps : kEps;
          if (mine) x.data<double>()[i] += delta;
          {
            NoGradGuard no_grad(ctx);
            loss[side] = global_loss(env.group, op(env.group, px).local, w, downstream);
          }
          if (mine) x.data<double>()[i] -= delta;
        }
        if (mine) {
          const double numeric = (loss[0] - loss[1]) / (2 * kEps);
          EXPECT_NEAR(analytic[static_cast<std::size_t>(i)], numeric, kTol)
              << name << " t=" << t << " rank " << env.rank << " element " << i;
        }
      }
    }
  });
}

TEST(CollectiveOps, BackwardsMatchFiniteDifferences) {
  const Shape seq{6, 2, 4};       // [s, b, h]: s divides by 2 and 3
  const Shape heads{6, 2, 6, 2};  // [s, b, a, d]
  for (int t : {2, 3}) {
    SCOPED_TRACE("t = " + std::to_string(t));
    check_op(
        "copy_to_tp", [](ProcessGroup& g, const ParallelTensor& x) { return copy_to_tp(g, x); },
        Placement::replicate(), seq, t);
    check_op("reduce_from_tp", reduce_from_tp, Placement::partial(), seq, t,
             Downstream::replicated);
    check_op("gather_seq", gather_seq, Placement::shard(0), seq, t);
    check_op("reduce_scatter_seq", reduce_scatter_seq, Placement::partial(), seq, t);
    check_op("split_last", split_last, Placement::replicate(), Shape{6, 2, 6}, t);
    check_op("gather_last", gather_last, Placement::shard(2), Shape{6, 2, 6}, t,
             Downstream::replicated);
    check_op("seq_to_heads", seq_to_heads, Placement::shard(0), heads, t);
    check_op(
        "heads_to_seq", [](ProcessGroup& g, const ParallelTensor& x) { return heads_to_seq(g, x); },
        Placement::shard(2), heads, t);
  }
}

TEST(CollectiveOps, GatherMatmulBackwardMatchesFiniteDifferences) {
  for (bool keep : {false, true}) {
    // The weight is fixed per rank; the check is on x.
    check_op(
        keep ? "gather_matmul (kept input)" : "gather_matmul",
        [keep](ProcessGroup& g, const ParallelTensor& x) {
          Tensor w = Tensor::randn(g.ctx(), {4, 3}, 300 + g.rank(), 1.0, DType::f64);
          return ParallelTensor{gather_matmul(g, x.local, w, keep), Placement::shard(2),
                                Shape{6, 2, 3}};
        },
        Placement::shard(0), Shape{6, 2, 4}, 3);
  }
}

TEST(CollectiveOps, AWrongPlacementIsAnErrorNamingTheOp) {
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  run_spmd(2, options, [](RankEnv& env) {
    Tensor x = Tensor::zeros(env.ctx, {4, 2, 4});
    const ParallelTensor partial{x, Placement::partial(), Shape{4, 2, 4}};
    try {
      gather_seq(env.group, partial);
      ADD_FAILURE() << "gather_seq accepted a Partial";
    } catch (const PlacementError& e) {
      EXPECT_THAT(e.what(), HasSubstr("gather_seq"));
      EXPECT_THAT(e.what(), HasSubstr("needs a Shard(0) input, given Partial"));
      EXPECT_THAT(e.what(), HasSubstr("is a reduction missing?"));
    }
    try {
      copy_to_tp(env.group, partial);
      ADD_FAILURE() << "copy_to_tp accepted a Partial";
    } catch (const PlacementError& e) {
      EXPECT_THAT(e.what(), HasSubstr("copy_to_tp"));
      EXPECT_THAT(e.what(), HasSubstr("needs a Replicate input"));
    }
  });
}

}  // namespace
}  // namespace shardscope
