// Lab 7 tests: the student's distributed LayerNorm on t = 1, 2 and 4 ranks (threads) against the
// single-device layernorm of the gathered tensor and against the framework's
// parallel/layers/sharded_layernorm.h (layernorm_exact, layernorm_local). Every rank builds the
// same full tensors from fixed seeds and takes its columns, so each can check its own shard. On a
// mismatch the message names the mistake the wrong values reproduce (the tests compute what each
// common mistake would give).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "autograd/node.h"
#include "autograd/observer.h"
#include "autograd/ops.h"
#include "labs/07-distributed-layernorm/lab.h"
#include "labs/common/lab_testing.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/sharded_layernorm.h"

namespace shardscope::labs {
namespace {

constexpr double kEps = 1e-5;
// x is [3, 2, f]: 6 rows of f = 24 features, which divides by every degree tested.
constexpr std::int64_t kRows = 6;
constexpr std::int64_t kF = 24;
const Shape kGlobal{3, 2, kF};
constexpr int kDegrees[] = {1, 2, 4};

const char* const kLocalStatsHint =
    "output off: were the statistics all-reduced? (a per-shard mean gives the local model)";

std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// ---- the data and the references ----------------------------------------------------------------

// Columns k * f/t .. (k + 1) * f/t - 1 of every row of a row-major [rows, f] vector.
std::vector<double> columns(const std::vector<double>& full, int k, int t) {
  const std::int64_t w = kF / t, rows = static_cast<std::int64_t>(full.size()) / kF;
  std::vector<double> out;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = k * w; j < (k + 1) * w; ++j) out.push_back(full[at(r * kF + j)]);
  }
  return out;
}

// The same full tensors on every rank (fixed seeds), and this rank's part of them.
struct Case {
  int t = 1, rank = 0;
  std::int64_t w = kF;  // features per rank
  std::vector<double> x_full, gamma_full, beta_full, dy_full;
  std::vector<double> x, gamma, beta, dy;  // this rank's columns
  Shape local{3, 2, kF};
  std::string where;  // " (t = 2, rank 1)"
};

Case make_case(RankEnv& env) {
  Case c;
  c.t = env.world;
  c.rank = env.rank;
  c.w = kF / c.t;
  c.local = Shape{3, 2, c.w};
  c.where = " (t = " + std::to_string(c.t) + ", rank " + std::to_string(c.rank) + ")";
  auto values = [&](const Shape& s, std::uint64_t seed, double std, double mean) {
    return Tensor::randn(env.ctx, s, seed, std, DType::f64, mean).to_vector();
  };
  c.x_full = values(kGlobal, 71, 1.5, 0.2);
  // A mean that drifts along the features, so every shard's mean differs from the row's.
  for (std::size_t i = 0; i < c.x_full.size(); ++i)
    c.x_full[i] += 0.1 * static_cast<double>(i % kF);
  c.gamma_full = values({kF}, 72, 0.5, 1.0);  // away from 1, so a forgotten gamma shows
  c.beta_full = values({kF}, 73, 0.5, 0.0);
  c.dy_full = values(kGlobal, 74, 1.0, 0.2);
  c.x = columns(c.x_full, c.rank, c.t);
  c.gamma = columns(c.gamma_full, c.rank, c.t);
  c.beta = columns(c.beta_full, c.rank, c.t);
  c.dy = columns(c.dy_full, c.rank, c.t);
  return c;
}

Tensor tensor(Context& ctx, const Shape& shape, const std::vector<double>& v, bool grad = false) {
  Tensor out = Tensor::from_vector(ctx, shape, v, DType::f64);
  if (grad) out.set_requires_grad(true);
  return out;
}

// The single-device layernorm of the gathered x: output, statistics and gradients (full).
struct SingleDevice {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

SingleDevice single_device(Context& ctx, const Case& c) {
  const Tensor x = tensor(ctx, kGlobal, c.x_full, true);
  const Tensor gamma = tensor(ctx, {kF}, c.gamma_full, true);
  const Tensor beta = tensor(ctx, {kF}, c.beta_full, true);
  const Tensor y = layernorm(x, gamma, beta, kEps);
  SingleDevice s;
  s.y = y.to_vector();
  s.mean = y.grad_fn()->saved(2).to_vector();  // the op saves x, gamma, mean, rstd
  s.rstd = y.grad_fn()->saved(3).to_vector();
  y.backward(tensor(ctx, kGlobal, c.dy_full));
  s.dx = x.grad().to_vector();
  s.dgamma = gamma.grad().to_vector();
  s.dbeta = beta.grad().to_vector();
  return s;
}

// A sharded LayerNorm: the student's or the framework's.
using Model = std::function<ParallelTensor(ProcessGroup&, const ParallelTensor&, const Tensor&,
                                           const Tensor&, double)>;

const Model kStudentExact = [](ProcessGroup& g, const ParallelTensor& x, const Tensor& gamma,
                               const Tensor& beta, double eps) {
  return layernorm_distributed(g, x, gamma, beta, eps);
};
const Model kStudentLocal = [](ProcessGroup& g, const ParallelTensor& x, const Tensor& gamma,
                               const Tensor& beta, double eps) {
  return layernorm_local_shard(g, x, gamma, beta, eps);
};
const Model kFrameworkExact = [](ProcessGroup& g, const ParallelTensor& x, const Tensor& gamma,
                                 const Tensor& beta,
                                 double eps) { return layernorm_exact(g, x, gamma, beta, eps); };
const Model kFrameworkLocal = [](ProcessGroup& g, const ParallelTensor& x, const Tensor& gamma,
                                 const Tensor& beta,
                                 double eps) { return layernorm_local(g, x, gamma, beta, eps); };

// One rank's output and, with `backward`, its gradients (from fresh leaves).
struct ModelRun {
  ParallelTensor y;
  std::vector<double> dx, dgamma, dbeta;
};

ModelRun run_model(RankEnv& env, const Case& c, const Model& model, bool backward) {
  const Tensor x = tensor(env.ctx, c.local, c.x, backward);
  const Tensor gamma = tensor(env.ctx, {c.w}, c.gamma, backward);
  const Tensor beta = tensor(env.ctx, {c.w}, c.beta, backward);
  ModelRun run;
  run.y = model(env.group, ParallelTensor{x, Placement::shard(2), kGlobal}, gamma, beta, kEps);
  if (!run.y.local.defined()) throw StateError("the op returned an undefined local tensor");
  if (backward) {
    run.y.local.backward(tensor(env.ctx, c.local, c.dy));
    run.dx = x.grad().to_vector();
    run.dgamma = gamma.grad().to_vector();
    run.dbeta = beta.grad().to_vector();
  }
  return run;
}

// ---- running and judging ------------------------------------------------------------------------

// A hint for an error a rank threw, from its message.
std::string error_hint(const std::string& message) {
  auto has = [&](const char* s) { return message.find(s) != std::string::npos; };
  if (has("gradient of input 1 has shape") || has("gradient of input 2 has shape")) {
    return "\nhint: dgamma of the wrong size: gamma is sharded like x, so dgamma and dbeta are "
           "[f/t], this rank's features only";
  }
  if (has("gradient of input 0 has shape")) {
    return "\nhint: dx has the shape of this rank's x shard, [..., f/t]";
  }
  if (has("which does not require grad")) {
    return "\nhint: build layernorm_distributed with apply_function1 so that it is on the tape";
  }
  if (has("collective mismatch")) {
    return "\nhint: every rank must issue the same collectives, in the same order and with the "
           "same sizes";
  }
  return "";
}

// Runs `fn` on t ranks (threads); a rank's error fails the test with its message and a hint.
// Once a degree has failed, the larger ones are skipped: their messages would say the same.
void on_ranks(int t, const std::function<void(RankEnv&)>& fn) {
  if (::testing::Test::HasFailure()) return;
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  try {
    run_spmd(t, options, fn);
  } catch (const Error& e) {
    ADD_FAILURE() << "t = " << t << ": " << e.what() << error_hint(e.what());
  }
}

// A common mistake: the values it would give, and what to tell the student.
struct Mistake {
  std::vector<double> would_give;
  std::string hint;
};

std::string diagnose(const std::vector<double>& got, const std::vector<Mistake>& mistakes,
                     const std::string& fallback = "") {
  for (const Mistake& m : mistakes) {
    if (m.would_give.size() == got.size() && matches("", got, m.would_give, 1)) return m.hint;
  }
  return fallback;
}

std::vector<double> values_of(const Tensor& t, const char* what) {
  if (!t.defined()) throw StateError(std::string(what) + " is an undefined tensor");
  return t.to_vector();
}

// Per row of the rank's columns [lo, hi) of x_full: the count, mean and sum of squares about
// `center` (the row's own mean over those columns when center is empty).
struct Partial {
  std::vector<double> mean, m2;
};

Partial partial(const Case& c, std::int64_t lo, std::int64_t hi,
                const std::vector<double>& center = {}) {
  Partial p;
  for (std::int64_t r = 0; r < kRows; ++r) {
    double m = 0.0;
    for (std::int64_t j = lo; j < hi; ++j) m += c.x_full[at(r * kF + j)];
    m /= static_cast<double>(hi - lo);
    const double about = center.empty() ? m : center[at(r)];
    double m2 = 0.0;
    for (std::int64_t j = lo; j < hi; ++j) {
      m2 += (c.x_full[at(r * kF + j)] - about) * (c.x_full[at(r * kF + j)] - about);
    }
    p.mean.push_back(m);
    p.m2.push_back(m2);
  }
  return p;
}

std::vector<double> rstd_of(const std::vector<double>& m2, double divisor, double eps = kEps) {
  std::vector<double> out;
  for (double v : m2) out.push_back(1.0 / std::sqrt(v / divisor + eps));
  return out;
}

// ---- Task 1 -------------------------------------------------------------------------------------

TEST(DistributedLayerNorm, Task1_RowStatisticsAreThoseOfTheFullRows) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const SingleDevice s = single_device(env.ctx, c);
      const RowStatistics st =
          distributed_row_statistics(env.group, tensor(env.ctx, c.local, c.x), kEps);
      const std::vector<double> mean = values_of(st.mean, "mean"),
                                rstd = values_of(st.rstd, "rstd");
      const double f = static_cast<double>(kF), w = static_cast<double>(c.w);
      const Partial own = partial(c, c.rank * c.w, (c.rank + 1) * c.w);
      const Partial full = partial(c, 0, kF);
      const Partial own_about_full = partial(c, c.rank * c.w, (c.rank + 1) * c.w, s.mean);
      std::vector<double> within(at(kRows), 0.0), variance, std_dev;
      for (int k = 0; k < c.t; ++k) {
        const Partial part = partial(c, k * c.w, (k + 1) * c.w);
        for (std::int64_t r = 0; r < kRows; ++r) within[at(r)] += part.m2[at(r)];
      }
      for (double m2 : full.m2) {
        variance.push_back(m2 / f);
        std_dev.push_back(std::sqrt(m2 / f + kEps));
      }
      EXPECT_TRUE(matches(
          "mean" + c.where, mean, s.mean, c.t,
          Hints()
              .if_times_t("the all-reduced sum was divided by the local width "
                          "f/t; divide by the full f = t * f/t")
              .otherwise(diagnose(mean, {{own.mean,
                                          "mean off: was the row sum all-reduced? (a per-shard "
                                          "mean gives the local model)"}}))));
      const bool mean_ok = matches("", mean, s.mean, 1);
      const std::vector<Mistake> rstd_mistakes{
          {rstd_of(own.m2, w),
           "rstd is this shard's own: the variance needs the all-reduce too (a per-shard "
           "variance gives the local model)"},
          {rstd_of(own_about_full.m2, w),
           "the sum of squares is this shard's only: all-reduce it too, then divide by the full f"},
          {rstd_of(own_about_full.m2, f),
           "the sum of squares is this shard's only: all-reduce it too"},
          {rstd_of(within, f),
           "each rank centred its squares on its own shard's mean: centre them on the full "
           "row's mean (or add Chan's between-shard term, docs/derivations.md)"},
          {rstd_of(full.m2, w), "divide the all-reduced sum of squares by the full f, not by f/t"},
          {rstd_of(full.m2, f - 1.0), "the variance is biased: divide by f, not f - 1"},
          {rstd_of(full.m2, f, 0.0), "rstd = 1 / sqrt(var + eps): eps is missing"},
          {variance, "that is the variance; rstd = 1 / sqrt(var + eps)"},
          {std_dev, "that is sqrt(var + eps); rstd is its reciprocal"}};
      EXPECT_TRUE(matches("rstd" + c.where, rstd, s.rstd, c.t,
                          Hints().otherwise(diagnose(
                              rstd, rstd_mistakes,
                              mean_ok ? "" : "rstd is centred on the mean: fix the mean first"))));
    });
  }
}

// ---- Task 2 -------------------------------------------------------------------------------------

TEST(DistributedLayerNorm, Task2_ForwardEqualsSingleDeviceLayerNormOfTheGatheredTensor) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const SingleDevice s = single_device(env.ctx, c);
      const ModelRun got = run_model(env, c, kStudentExact, false);
      const ModelRun local = run_model(env, c, kFrameworkLocal, false);
      EXPECT_EQ(got.y.placement, Placement::shard(2)) << "the output is Shard(last)" << c.where;
      EXPECT_EQ(got.y.global, kGlobal) << "the output's global shape is x's" << c.where;
      const std::vector<double> y = got.y.local.to_vector();
      // xhat alone: the affine part forgotten
      std::vector<double> xhat;
      for (std::int64_t r = 0; r < kRows; ++r) {
        for (std::int64_t j = 0; j < c.w; ++j) {
          const std::int64_t col = c.rank * c.w + j;
          xhat.push_back((c.x_full[at(r * kF + col)] - s.mean[at(r)]) * s.rstd[at(r)]);
        }
      }
      EXPECT_TRUE(matches("output" + c.where, got.y.local,
                          tensor(env.ctx, c.local, columns(s.y, c.rank, c.t)), c.t,
                          Hints().otherwise(diagnose(
                              y,
                              {{local.y.local.to_vector(), kLocalStatsHint},
                               {xhat, "y = xhat * gamma + beta: the affine part is missing"}},
                              "the output uses the full rows' mean and rstd: check task 1 "
                              "(--filter '*Task1*')"))));
    });
  }
}

// ---- Task 3 -------------------------------------------------------------------------------------

TEST(DistributedLayerNorm, Task3_BackwardRowSumsAreThoseOfTheFullRows) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const SingleDevice s = single_device(env.ctx, c);
      // The reference statistics, so that this task does not depend on task 1.
      const RowStatistics st{tensor(env.ctx, {kRows}, s.mean), tensor(env.ctx, {kRows}, s.rstd)};
      const Tensor got = distributed_backward_row_sums(env.group, tensor(env.ctx, c.local, c.dy),
                                                       tensor(env.ctx, c.local, c.x),
                                                       tensor(env.ctx, {c.w}, c.gamma), st);
      // S1, S2 over all features; over this rank's only; without gamma; swapped; divided by f
      std::vector<double> want, own, no_gamma, swapped, over_f;
      for (std::int64_t r = 0; r < kRows; ++r) {
        double s1 = 0, s2 = 0, o1 = 0, o2 = 0, n1 = 0, n2 = 0;
        for (std::int64_t j = 0; j < kF; ++j) {
          const std::size_t i = at(r * kF + j);
          const double xhat = (c.x_full[i] - s.mean[at(r)]) * s.rstd[at(r)];
          const double dxhat = c.dy_full[i] * c.gamma_full[at(j)];
          s1 += dxhat;
          s2 += dxhat * xhat;
          n1 += c.dy_full[i];
          n2 += c.dy_full[i] * xhat;
          if (j / c.w == c.rank) {
            o1 += dxhat;
            o2 += dxhat * xhat;
          }
        }
        want.insert(want.end(), {s1, s2});
        own.insert(own.end(), {o1, o2});
        no_gamma.insert(no_gamma.end(), {n1, n2});
        swapped.insert(swapped.end(), {s2, s1});
        over_f.insert(over_f.end(), {s1 / kF, s2 / kF});
      }
      const std::vector<Mistake> mistakes{
          {own, "the sums cover this shard's features only: all-reduce them over the group"},
          {no_gamma, "dxhat = dy * gamma: gamma is missing"},
          {swapped, "column 0 is S1 = sum dxhat, column 1 is S2 = sum dxhat * xhat"},
          {over_f, "return the sums themselves; dx divides them by the full f"}};
      EXPECT_TRUE(matches("row sums [rows, 2]" + c.where, got, tensor(env.ctx, {kRows, 2}, want),
                          c.t,
                          Hints().otherwise(diagnose(values_of(got, "the row sums"), mistakes))));
    });
  }
}

// ---- Task 4 -------------------------------------------------------------------------------------

// dx with the row sums of this rank's features only (no all-reduce), or divided by f/t, or
// without the factor rstd in front.
std::vector<double> dx_variant(const Case& c, const SingleDevice& s, bool all_reduced,
                               double divisor, bool times_rstd = true) {
  std::vector<double> dx;
  for (std::int64_t r = 0; r < kRows; ++r) {
    double s1 = 0, s2 = 0;
    for (std::int64_t j = 0; j < kF; ++j) {
      if (!all_reduced && j / c.w != c.rank) continue;
      const std::size_t i = at(r * kF + j);
      const double dxhat = c.dy_full[i] * c.gamma_full[at(j)];
      s1 += dxhat;
      s2 += dxhat * (c.x_full[i] - s.mean[at(r)]) * s.rstd[at(r)];
    }
    for (std::int64_t j = c.rank * c.w; j < (c.rank + 1) * c.w; ++j) {
      const std::size_t i = at(r * kF + j);
      const double xhat = (c.x_full[i] - s.mean[at(r)]) * s.rstd[at(r)];
      const double dxhat = c.dy_full[i] * c.gamma_full[at(j)];
      dx.push_back((times_rstd ? s.rstd[at(r)] : 1.0) *
                   (dxhat - s1 / divisor - xhat * s2 / divisor));
    }
  }
  return dx;
}

// dx on this rank against its columns of the single-device dx.
::testing::AssertionResult judge_dx(const Case& c, const SingleDevice& s,
                                    const std::vector<double>& got) {
  const double f = static_cast<double>(kF), w = static_cast<double>(c.w);
  const std::vector<Mistake> dx_mistakes{
      {dx_variant(c, s, false, f),
       "dx off but output right: the backward needs the all-reduce of the row sums too"},
      {dx_variant(c, s, true, w),
       "divide the all-reduced row sums by the full f, not by the local width f/t"},
      {dx_variant(c, s, true, f, false),
       "the factor rstd in front is missing: dx = rstd (dxhat - mean(dxhat) - xhat "
       "mean(dxhat xhat))"}};
  return matches("dx" + c.where, got, columns(s.dx, c.rank, c.t), c.t,
                 Hints().otherwise(diagnose(
                     got, dx_mistakes,
                     "compare with dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), the "
                     "means over all f features of the row")));
}

// The sum over ranks of each rank's [f/t] columns of a full [f] gradient: what all-reducing the
// gamma or beta gradient would give.
std::vector<double> summed_over_ranks(const std::vector<double>& full, int t) {
  std::vector<double> out(at(kF / t), 0.0);
  for (int k = 0; k < t; ++k) {
    const std::vector<double> part = columns(full, k, t);
    for (std::size_t j = 0; j < out.size(); ++j) out[j] += part[j];
  }
  return out;
}

const char* const kNoCollectiveForParams =
    "dgamma and dbeta need no collective: feature j lives on one rank and every rank holds all "
    "the rows (contrast TP-SP, where the rows are split and they are all-reduced)";

TEST(DistributedLayerNorm, Task4_BackwardEqualsSingleDeviceLayerNormOfTheGatheredTensor) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const SingleDevice s = single_device(env.ctx, c);
      const ModelRun got = run_model(env, c, kStudentExact, true);
      EXPECT_TRUE(matches(
          "output" + c.where, got.y.local.to_vector(), columns(s.y, c.rank, c.t), c.t,
          Hints().otherwise("the forward is off: finish task 2 first (--filter '*Task2*')")));
      EXPECT_TRUE(judge_dx(c, s, got.dx));
      EXPECT_TRUE(matches(
          "dgamma" + c.where, got.dgamma, columns(s.dgamma, c.rank, c.t), c.t,
          Hints().otherwise(diagnose(got.dgamma,
                                     {{summed_over_ranks(s.dgamma, c.t), kNoCollectiveForParams}},
                                     "dgamma = sum over rows of dy * xhat, for this rank's "
                                     "features"))));
      EXPECT_TRUE(matches(
          "dbeta" + c.where, got.dbeta, columns(s.dbeta, c.rank, c.t), c.t,
          Hints().otherwise(diagnose(got.dbeta,
                                     {{summed_over_ranks(s.dbeta, c.t), kNoCollectiveForParams}},
                                     "dbeta = sum over rows of dy, for this rank's features"))));
    });
  }
}

TEST(DistributedLayerNorm, Task4_AgreesWithTheFrameworksLayerNormExact) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const ModelRun got = run_model(env, c, kStudentExact, true);
      const ModelRun want = run_model(env, c, kFrameworkExact, true);
      EXPECT_TRUE(matches("output vs layernorm_exact" + c.where, got.y.local.to_vector(),
                          want.y.local.to_vector(), c.t));
      EXPECT_TRUE(matches("dx vs layernorm_exact" + c.where, got.dx, want.dx, c.t));
      EXPECT_TRUE(matches("dgamma vs layernorm_exact" + c.where, got.dgamma, want.dgamma, c.t));
      EXPECT_TRUE(matches("dbeta vs layernorm_exact" + c.where, got.dbeta, want.dbeta, c.t));
    });
  }
}

// Records the collectives one rank issues.
struct CollectiveRecorder final : Observer {
  std::vector<CollectiveEvent> events;
  void on_collective(const CollectiveEvent& e) override { events.push_back(e); }
};

TEST(DistributedLayerNorm, Task4_SendsRowStatisticsNotFeatures) {
  for (int t : {2, 4}) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      CollectiveRecorder recorder;
      {
        ObserverGuard guard(env.ctx, recorder);
        run_model(env, c, kStudentExact, true);
      }
      std::int64_t forward = 0, backward = 0, n_forward = 0, n_backward = 0;
      for (const CollectiveEvent& e : recorder.events) {
        (e.site.phase == Phase::forward ? forward : backward) += e.count;
        ++(e.site.phase == Phase::forward ? n_forward : n_backward);
      }
      const std::int64_t budget = 3 * kRows;  // a few numbers per row
      EXPECT_GE(n_forward, 1) << "the forward issued no collective" << c.where
                              << ": the full rows' statistics need the other ranks' partial "
                                 "sums. "
                              << kLocalStatsHint;
      EXPECT_LE(forward, budget) << "the forward sent " << forward << " values per rank over "
                                 << n_forward << " collectives" << c.where
                                 << "; the exact LayerNorm needs a few numbers per row (" << budget
                                 << " for " << kRows << " rows), never the " << kRows * c.w
                                 << " features (did you gather x?)";
      EXPECT_GE(n_backward, 1) << "the backward issued no collective" << c.where
                               << ": dx needs the all-reduce of the row sums S1 and S2";
      EXPECT_LE(backward, budget) << "the backward sent " << backward << " values per rank over "
                                  << n_backward << " collectives" << c.where
                                  << "; it needs the two row sums per row (" << 2 * kRows
                                  << " values), and dgamma and dbeta need none";
    });
  }
}

// ---- Task 5 -------------------------------------------------------------------------------------

TEST(DistributedLayerNorm, Task5_LocalShardIsTheFrameworksLayerNormLocal) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const ModelRun got = run_model(env, c, kStudentLocal, true);
      const ModelRun want = run_model(env, c, kFrameworkLocal, true);
      const ModelRun exact = run_model(env, c, kFrameworkExact, false);
      EXPECT_EQ(got.y.placement, Placement::shard(2)) << "the output is Shard(last)" << c.where;
      EXPECT_EQ(got.y.global, kGlobal) << "the output's global shape is x's" << c.where;
      const std::vector<double> y = got.y.local.to_vector();
      EXPECT_TRUE(matches(
          "local output" + c.where, y, want.y.local.to_vector(), c.t,
          Hints().otherwise(diagnose(
              y, {{exact.y.local.to_vector(),
                   "that is the exact LayerNorm; the local model normalises the shard by its "
                   "own statistics, with no communication"}}))));
      EXPECT_TRUE(matches("local dx" + c.where, got.dx, want.dx, c.t));
      EXPECT_TRUE(matches("local dgamma" + c.where, got.dgamma, want.dgamma, c.t));
    });
  }
}

// ---- Task 6 -------------------------------------------------------------------------------------

TEST(DistributedLayerNorm, Task6_LocalVsExactMaxDifference) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const ParallelTensor x{tensor(env.ctx, c.local, c.x), Placement::shard(2), kGlobal};
      const Tensor gamma = tensor(env.ctx, {c.w}, c.gamma), beta = tensor(env.ctx, {c.w}, c.beta);
      const double got = local_vs_exact_max_difference(env.group, x, gamma, beta, kEps);
      // The framework's answer: this rank's max, then the max over the ranks.
      NoGradGuard no_grad(env.ctx);
      const std::vector<double> local =
          layernorm_local(env.group, x, gamma, beta).local.to_vector();
      const std::vector<double> exact =
          layernorm_exact(env.group, x, gamma, beta).local.to_vector();
      double mine = 0.0;
      for (std::size_t i = 0; i < local.size(); ++i) {
        mine = std::max(mine, std::abs(local[i] - exact[i]));
      }
      Tensor all = Tensor::full(env.ctx, {1}, mine, DType::f64);
      env.group.all_reduce(all, ReduceOp::max, CommPurpose::check);
      const double want = all.item();
      const bool own_only = std::abs(got - mine) <= 1e-9 && std::abs(got - want) > 1e-9;
      EXPECT_NEAR(got, want, 1e-9)
          << c.where
          << (own_only ? ": this is this rank's max only; all-reduce it with ReduceOp::max so "
                         "that every rank returns the max over the whole tensor"
                       : "");
      if (c.t == 1) {
        EXPECT_LE(got, 1e-12) << "at t = 1 the shard is the whole row: both models agree";
      } else {
        EXPECT_GT(got, 1e-2) << c.where << ": at t > 1 the two are different models";
      }
    });
  }
}

// ---- Task 7 -------------------------------------------------------------------------------------

TEST(DistributedLayerNorm, Task7_LayerNormOfSlicesIsTheLocalModel) {
  for (int t : kDegrees) {
    on_ranks(t, [](RankEnv& env) {
      const Case c = make_case(env);
      const SingleDevice s = single_device(env.ctx, c);
      const Tensor y = layernorm_of_slices(tensor(env.ctx, kGlobal, c.x_full),
                                           tensor(env.ctx, {kF}, c.gamma_full),
                                           tensor(env.ctx, {kF}, c.beta_full), c.t, kEps);
      const ModelRun local = run_model(env, c, kFrameworkLocal, false);
      if (y.shape() != kGlobal) {
        ADD_FAILURE() << "layernorm_of_slices returned " << y.describe() << ", expected "
                      << kGlobal.str() << c.where;
        return;
      }
      const std::vector<double> mine = columns(y.to_vector(), c.rank, c.t);
      EXPECT_TRUE(matches(
          "this rank's columns of layernorm_of_slices vs layernorm_local" + c.where, mine,
          local.y.local.to_vector(), c.t,
          Hints().otherwise(diagnose(mine, {{columns(s.y, c.rank, c.t),
                                             "that is the LayerNorm of whole rows: reshape to "
                                             "[..., t, f/t] so that each slice is normalised "
                                             "alone"}}))));
    });
  }
  Context ctx;
  const Tensor x = Tensor::zeros(ctx, kGlobal, DType::f64),
               g = Tensor::zeros(ctx, {kF}, DType::f64);
  try {
    layernorm_of_slices(x, g, g, 5, kEps);
    ADD_FAILURE() << "layernorm_of_slices accepted t = 5 with f = 24: throw ShapeError";
  } catch (const ShapeError&) {
  }
}

#ifdef SHARDSCOPE_LAB_GRADER_TESTS
// ---- the graders' own tests (the instructor's tree only) ----------------------------------------
// A planted student mistake, judged by the helper the lab's test uses: the hint must name it.

// The planted backward: row sums all-reduced and divided by f, but dx lacks the factor rstd.
std::vector<double> dx_without_rstd(RankEnv& env, const Case& c, const SingleDevice& s) {
  Tensor sums = Tensor::zeros(env.ctx, {kRows, 2}, DType::f64);
  double* sv = sums.data<double>();
  auto xhat_at = [&](std::int64_t r, std::int64_t j) {
    return (c.x[at(r * c.w + j)] - s.mean[at(r)]) * s.rstd[at(r)];
  };
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t j = 0; j < c.w; ++j) {
      const double dxhat = c.dy[at(r * c.w + j)] * c.gamma[at(j)];
      sv[2 * r] += dxhat;
      sv[2 * r + 1] += dxhat * xhat_at(r, j);
    }
  }
  env.group.all_reduce(sums, ReduceOp::sum);
  std::vector<double> dx;
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t j = 0; j < c.w; ++j) {
      const double dxhat = c.dy[at(r * c.w + j)] * c.gamma[at(j)];
      dx.push_back(dxhat - sv[2 * r] / kF - xhat_at(r, j) * sv[2 * r + 1] / kF);
    }
  }
  return dx;
}

TEST(GraderHints, DxWithoutRstdIsNamed) {
  on_ranks(2, [](RankEnv& env) {
    const Case c = make_case(env);
    const SingleDevice s = single_device(env.ctx, c);
    const ::testing::AssertionResult r = judge_dx(c, s, dx_without_rstd(env, c, s));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.message(), ::testing::HasSubstr("the factor rstd in front is missing"));
  });
}
#endif

}  // namespace
}  // namespace shardscope::labs
