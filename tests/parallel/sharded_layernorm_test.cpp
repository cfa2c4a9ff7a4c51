// LayerNorm over a sharded feature dim: layernorm_exact and the Linear (column) -> LayerNorm ->
// Linear (row) block against the single-device block; layernorm_local as a different, well-defined
// model (LayerNorm of each feature slice alone); the exact backward against distributed finite
// differences; what it communicates; and the errors of bad inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <tuple>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "parallel/layers/mlp_ln_block.h"
#include "parallel/layers/sharded_layernorm.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

SpmdOptions spmd_options() {
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  return options;
}

// f = 48 divides by the degrees 2, 3 and 4.
MlpLnConfig small_config(int degree, DType dtype) {
  MlpLnConfig c;
  c.seq = 6;
  c.batch = 2;
  c.hidden = 16;
  c.ffn = 48;
  c.degree = degree;
  c.dtype = dtype;
  c.seed = 7;
  return c;
}

MlpLnComparison run_block(const MlpLnConfig& c, ShardedNorm norm) {
  MlpLnComparison rank0;
  std::mutex mutex;
  run_spmd(c.degree, spmd_options(), [&](RankEnv& env) {
    MlpLnComparison result = run_mlp_ln_rank(env, c, norm);
    std::lock_guard<std::mutex> lock(mutex);
    if (env.rank == 0) rank0 = std::move(result);
  });
  return rank0;
}

// Every tensor passes the checks' rule (parallel/run/tensor_compare.h) at the dtype's tolerance.
void expect_all_pass(const std::vector<TensorCheck>& diffs, const std::string& what) {
  ASSERT_EQ(diffs.size(), 8u) << what;  // output, input.grad and six parameter gradients
  for (const TensorCheck& d : diffs) {
    EXPECT_TRUE(d.passed) << what << " " << d.name << ": " << d.failed << " of " << d.elements
                          << " elements out of tolerance (max abs " << d.max_abs_err << ")";
  }
}

using BlockCase = std::tuple<int, DType>;

class MlpLnBlockDegrees : public ::testing::TestWithParam<BlockCase> {};

TEST_P(MlpLnBlockDegrees, ExactEqualsTheSingleDeviceBlock) {
  const auto [degree, dtype] = GetParam();
  const MlpLnConfig c = small_config(degree, dtype);
  const MlpLnComparison r = run_block(c, ShardedNorm::exact);
  expect_all_pass(r.vs_single, "exact t=" + std::to_string(degree) + " " + dtype_name(dtype));
}

TEST_P(MlpLnBlockDegrees, LocalIsADifferentModelEqualToPerSliceLayerNorm) {
  const auto [degree, dtype] = GetParam();
  const MlpLnConfig c = small_config(degree, dtype);
  const MlpLnComparison r = run_block(c, ShardedNorm::local);
  const std::string what = "local t=" + std::to_string(degree) + " " + dtype_name(dtype);
  ASSERT_FALSE(r.vs_single.empty());
  ASSERT_EQ(r.vs_single[0].name, "output");
  // Random data: each slice's mean and variance differ from the full row's by O(1/sqrt(f/t)).
  EXPECT_GT(r.vs_single[0].max_rel_err, 1e-2) << what;
  EXPECT_FALSE(r.vs_single[0].passed) << what;
  expect_all_pass(r.vs_sliced, what + " vs LayerNorm per slice");
}

INSTANTIATE_TEST_SUITE_P(DegreesAndDtypes, MlpLnBlockDegrees,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(DType::f64, DType::f32)),
                         [](const ::testing::TestParamInfo<BlockCase>& param_info) {
                           return "t" + std::to_string(std::get<0>(param_info.param)) + "_" +
                                  dtype_name(std::get<1>(param_info.param));
                         });

TEST(MlpLnBlock, AtDegreeOneLocalAndExactAreTheSingleDeviceBlock) {
  for (ShardedNorm norm : {ShardedNorm::exact, ShardedNorm::local}) {
    const MlpLnComparison r = run_block(small_config(1, DType::f64), norm);
    expect_all_pass(r.vs_single, sharded_norm_name(norm));
  }
}

// f64 central differences of a smooth function: errors near 1e-9 against O(1) for a wrong
// backward (a missing all-reduce of the row sums leaves terms of the size of the gradient).
constexpr double kEps = 1e-6;
constexpr double kTol = 1e-7;

// The loss downstream of layernorm_exact: a row-parallel linear follows, so each rank computes
// something different from its shard and the loss is the sum over ranks of sum(y_r * w_r).
double summed_loss(ProcessGroup& g, const Tensor& y, const Tensor& w) {
  NoGradGuard no_grad(g.ctx());
  Tensor local = Tensor::full(g.ctx(), {1}, sum(mul(y, w)).item(), DType::f64);
  g.all_reduce(local, ReduceOp::sum, CommPurpose::check);
  return local.item();
}

// Runs on every rank: the analytic gradients of x (Shard(last)), gamma and beta from one
// backward against central differences, every rank perturbing its elements in turn while all
// ranks recompute the forward (the statistics are exchanged, so every rank's output moves).
void check_exact_backward(const Shape& global, int t) {
  run_spmd(t, spmd_options(), [&](RankEnv& env) {
    Context& ctx = env.ctx;
    const int last = global.rank() - 1;
    const Shape local = local_shape(global, Placement::shard(last), t);
    // Shards with different means, so Chan's combination has work to do.
    Tensor x = Tensor::randn(ctx, local, 100 + env.rank, 1.0, DType::f64, env.rank);
    Tensor gamma = Tensor::randn(ctx, {local[last]}, 300 + env.rank, 0.5, DType::f64, 1.0);
    Tensor beta = Tensor::randn(ctx, {local[last]}, 400 + env.rank, 0.5, DType::f64);
    std::vector<Tensor> inputs{x, gamma, beta};
    const char* names[] = {"x", "gamma", "beta"};
    for (Tensor& in : inputs) in.set_requires_grad(true);
    const ParallelTensor px{x, Placement::shard(last), global};
    auto forward = [&] { return layernorm_exact(env.group, px, gamma, beta, 1e-5).local; };
    const Tensor w = Tensor::randn(ctx, local, 200 + env.rank, 1.0, DType::f64);
    forward().backward(w);
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const std::vector<double> analytic = inputs[k].grad().to_vector();
      for (int owner = 0; owner < t; ++owner) {
        const bool mine = env.rank == owner;
        for (std::int64_t i = 0; i < inputs[k].numel(); ++i) {
          double loss[2];
          for (int side = 0; side < 2; ++side) {
            const double delta = side ? -kEps : kEps;
            if (mine) inputs[k].data<double>()[i] += delta;
            {
              NoGradGuard no_grad(ctx);
              loss[side] = summed_loss(env.group, forward(), w);
            }
            if (mine) inputs[k].data<double>()[i] -= delta;
          }
          if (!mine) continue;
          EXPECT_NEAR(analytic[static_cast<std::size_t>(i)], (loss[0] - loss[1]) / (2 * kEps), kTol)
              << "layernorm_exact d" << names[k] << " t=" << t << " rank " << env.rank
              << " element " << i;
        }
      }
    }
  });
}

TEST(ShardedLayerNorm, ExactBackwardMatchesDistributedFiniteDifferences) {
  for (int t : {2, 3, 4}) {
    SCOPED_TRACE("t = " + std::to_string(t));
    check_exact_backward(Shape{3, 2, 12}, t);
  }
}

// Records the collectives one rank issues (the site's views live only during the callback, so
// the issuing op's name is copied).
struct CollectiveRecorder final : Observer {
  std::vector<CollectiveEvent> events;
  std::vector<std::string> ops;
  void on_collective(const CollectiveEvent& e) override {
    events.push_back(e);
    ops.emplace_back(e.site.op);
  }
};

TEST(ShardedLayerNorm, ExactSendsStatisticsForwardAndRowSumsBackwardOnly) {
  run_spmd(3, spmd_options(), [](RankEnv& env) {
    CollectiveRecorder recorder;
    ObserverGuard guard(env.ctx, recorder);
    Tensor x = Tensor::randn(env.ctx, {4, 2, 5}, 10 + env.rank, 1.0, DType::f32, env.rank);
    x.set_requires_grad(true);
    Tensor gamma = Tensor::full(env.ctx, {5}, 1.0), beta = Tensor::zeros(env.ctx, {5});
    const ParallelTensor y =
        layernorm_exact(env.group, {x, Placement::shard(2), Shape{4, 2, 15}}, gamma, beta);
    y.local.backward(Tensor::full(env.ctx, {4, 2, 5}, 0.5));
    ASSERT_EQ(recorder.events.size(), 2u);
    const CollectiveEvent& fwd = recorder.events[0];
    const CollectiveEvent& bwd = recorder.events[1];
    EXPECT_EQ(fwd.kind, CollectiveKind::all_gather);
    EXPECT_EQ(fwd.site.phase, Phase::forward);
    EXPECT_EQ(fwd.count, 8 * 3);  // rows x (count, mean, M2)
    EXPECT_EQ(fwd.dtype, DType::f64);
    EXPECT_EQ(recorder.ops[0], "layernorm_exact");
    EXPECT_EQ(bwd.kind, CollectiveKind::all_reduce);
    EXPECT_EQ(bwd.site.phase, Phase::backward);
    EXPECT_EQ(bwd.count, 8 * 2);  // rows x (sum dxhat, sum dxhat xhat)
  });
}

TEST(ShardedLayerNorm, ExactGivesEveryRankTheSameBitsOfMeanAndRstd) {
  run_spmd(4, spmd_options(), [](RankEnv& env) {
    Tensor x = Tensor::randn(env.ctx, {3, 2, 7}, 50 + env.rank, 2.0, DType::f32, env.rank);
    x.set_requires_grad(true);
    Tensor gamma = Tensor::full(env.ctx, {7}, 1.0), beta = Tensor::zeros(env.ctx, {7});
    const ParallelTensor y =
        layernorm_exact(env.group, {x, Placement::shard(2), Shape{3, 2, 28}}, gamma, beta);
    const Node& node = *y.local.grad_fn();
    for (std::size_t k : {std::size_t{2}, std::size_t{3}}) {  // saved mean, rstd [3, 2]
      const std::vector<double> all =
          env.group.all_gather(reshape(node.saved(k), {1, 6}), CommPurpose::check).to_vector();
      for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], all[i % 6]) << i;
    }
  });
}

TEST(ShardedLayerNorm, BadInputsAreErrorsNamingTheOpAndRank) {
  run_spmd(2, spmd_options(), [](RankEnv& env) {
    const std::string rank = "rank " + std::to_string(env.rank);
    Tensor gamma = Tensor::full(env.ctx, {4}, 1.0), beta = Tensor::zeros(env.ctx, {4});
    const ParallelTensor replicated{Tensor::zeros(env.ctx, {4, 2, 8}), Placement::replicate(),
                                    Shape{4, 2, 8}};
    try {
      layernorm_exact(env.group, replicated, gamma, beta);
      ADD_FAILURE() << "layernorm_exact accepted a Replicate input";
    } catch (const PlacementError& e) {
      EXPECT_THAT(e.what(), HasSubstr("layernorm_exact"));
      EXPECT_THAT(e.what(), HasSubstr("needs a Shard(2) input, given Replicate"));
      EXPECT_THAT(e.what(), HasSubstr(rank));
    }
    try {
      layernorm_local(env.group, replicated, gamma, beta);
      ADD_FAILURE() << "layernorm_local accepted a Replicate input";
    } catch (const PlacementError& e) {
      EXPECT_THAT(e.what(), HasSubstr("layernorm_local"));
    }
    const ParallelTensor sharded{Tensor::zeros(env.ctx, {4, 2, 4}), Placement::shard(2),
                                 Shape{4, 2, 8}};
    const Tensor full_gamma = Tensor::full(env.ctx, {8}, 1.0);  // the full [f], not the [f/t] shard
    try {
      layernorm_exact(env.group, sharded, full_gamma, beta);
      ADD_FAILURE() << "layernorm_exact accepted a gamma of the full feature dim";
    } catch (const ShapeError& e) {
      EXPECT_THAT(e.what(), HasSubstr("layernorm_exact"));
      EXPECT_THAT(e.what(), HasSubstr("must be [4]"));
      EXPECT_THAT(e.what(), HasSubstr(rank));
    }
  });
}

TEST(MlpLnBlock, ConfigRulesNameTheFlag) {
  MlpLnConfig c = small_config(4, DType::f32);
  c.ffn = 30;
  try {
    c.validate();
    ADD_FAILURE() << "--ffn 30 --degree 4 accepted";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ffn 30 must be divisible by degree 4"));
  }
}

// The block and the layer share the rules of every configuration (layer_config.h): a size past
// the tensor limit names the sizes that make the largest tensor; a dtype that is no float and an
// eps <= 0 name their field.
TEST(MlpLnBlock, SharesTheLayersSizeDtypeAndEpsRules) {
  MlpLnConfig c = small_config(1, DType::f32);
  c.seq = c.batch = std::int64_t{1} << 20;
  c.ffn = c.hidden = 1 << 10;
  try {
    c.validate();
    ADD_FAILURE() << "a 1e15-element activation accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ffn 1024 need tensors of 1.13e+15 elements, more than the "
                                    "1e12 this build accepts"));
    EXPECT_EQ(e.fields(), (std::vector<std::string>{"seq", "batch", "hidden", "ffn"}));
  }
  c = small_config(1, DType::u8);
  EXPECT_THROW(c.validate(), ConfigError);
  c = small_config(1, DType::f32);
  c.layernorm_eps = 0;
  try {
    c.validate();
    ADD_FAILURE() << "eps 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.fields(), std::vector<std::string>{"layernorm_eps"});
  }
}

}  // namespace
}  // namespace shardscope
