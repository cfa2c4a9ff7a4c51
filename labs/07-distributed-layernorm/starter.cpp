// Lab 7 starter: write the functions declared in lab.h, in task order. Each throws "not
// implemented yet" until you replace its body. Run the tests with `shardscope lab 7`.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "labs/07-distributed-layernorm/lab.h"
#include "labs/common/lab_support.h"

namespace shardscope::labs {

RowStatistics distributed_row_statistics(ProcessGroup& /*group*/, const Tensor& /*x_shard*/,
                                         double /*eps*/) {
  // TODO(task 1): the mean and rstd of the full rows.
  //   rows = x_shard.numel() / x_shard.dim(-1), w = x_shard.dim(-1), f = w * group.size();
  //   read the values with x_shard.data<double>() (row r, feature j at r * w + j).
  //   1. Tensor::zeros(x_shard.ctx(), Shape{rows}, DType::f64), fill it with this rank's
  //      per-row sum of x, group.all_reduce(it, ReduceOp::sum), divide by the FULL f: the mean.
  //   2. The same with sum_j (x_j - mean)^2 over this rank's features (centred on the full
  //      row's mean from step 1): all-reduced and divided by f it is the variance.
  //      rstd = 1 / sqrt(var + eps).
  // (Or one fused all-reduce of [rows, 2] holding sum x and sum x^2: README, "Cost".)
  not_implemented("distributed_row_statistics");
}

Tensor distributed_backward_row_sums(ProcessGroup& /*group*/, const Tensor& /*dy*/,
                                     const Tensor& /*x_shard*/, const Tensor& /*gamma_shard*/,
                                     const RowStatistics& /*stats*/) {
  // TODO(task 3): a [rows, 2] f64 tensor; for every row r and local feature j:
  //   xhat = (x - mean[r]) rstd[r],  dxhat = dy * gamma[j],
  //   sums[2 r] += dxhat,  sums[2 r + 1] += dxhat * xhat;
  // then all-reduce it (sum) over the group: every rank gets the full rows' S1 and S2.
  not_implemented("distributed_backward_row_sums");
}

ParallelTensor layernorm_distributed(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                                     const Tensor& /*gamma_shard*/, const Tensor& /*beta_shard*/,
                                     double /*eps*/) {
  // TODO(task 2, then task 4): one op on the tape, written with apply_function1
  // (autograd/function.h):
  //
  //   expect_placement("lab_layernorm_distributed", x, Placement::shard(x.global.rank() - 1));
  //   ProcessGroup* g = &group;                        // the lambdas outlive this call
  //   const double f = static_cast<double>(x.global.dims().back());
  //   Tensor y = apply_function1(
  //       "lab_layernorm_distributed", {x.local, gamma_shard, beta_shard},
  //       [g, eps](const std::vector<Tensor>& in, std::vector<Tensor>& save) {
  //         // task 2: statistics (task 1), y = (x - mean) rstd gamma + beta on the shard,
  //         // save = {x, gamma, mean, rstd}; return std::vector<Tensor>{y};
  //       },
  //       [g, f](const std::vector<Tensor>& saved, const std::vector<Tensor>& grads) {
  //         // task 4: sums = distributed_backward_row_sums(*g, grads[0], ...);
  //         // dx = rstd (dxhat - S1 / f - xhat S2 / f); dgamma += dy xhat and dbeta += dy over
  //         // the rows, for this rank's features; return {dx, dgamma, dbeta};
  //       });
  //   return ParallelTensor{y, x.placement, x.global};
  //
  // Until task 4, the backward may simply call not_implemented("layernorm_distributed backward").
  not_implemented("layernorm_distributed");
}

ParallelTensor layernorm_local_shard(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                                     const Tensor& /*gamma_shard*/, const Tensor& /*beta_shard*/,
                                     double /*eps*/) {
  // TODO(task 5): normalise the local shard by its own statistics: the ordinary layernorm op
  // (autograd/ops.h) on x.local. Return it as Shard(last) of x.global, like task 2.
  not_implemented("layernorm_local_shard");
}

double local_vs_exact_max_difference(ProcessGroup& /*group*/, const ParallelTensor& /*x*/,
                                     const Tensor& /*gamma_shard*/, const Tensor& /*beta_shard*/,
                                     double /*eps*/) {
  // TODO(task 6): under NoGradGuard no_grad(group.ctx()), run both models, take this rank's
  // max |local - exact|, then make it the max over all ranks: a [1] f64 tensor and
  // group.all_reduce(t, ReduceOp::max).
  not_implemented("local_vs_exact_max_difference");
}

Tensor layernorm_of_slices(const Tensor& /*x*/, const Tensor& /*gamma*/, const Tensor& /*beta*/,
                           int /*t*/, double /*eps*/) {
  // TODO(task 7): one device, no group. reshape x [..., f] to [..., t, f/t], apply the ordinary
  // layernorm with weight 1 and bias 0 of shape [f/t], reshape back to [..., f], then
  // add(mul(xhat, gamma), beta) with the full [f] gamma and beta. Throw ShapeError when t does
  // not divide f.
  not_implemented("layernorm_of_slices");
}

}  // namespace shardscope::labs
