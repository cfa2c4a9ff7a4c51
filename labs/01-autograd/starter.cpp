// Lab 1 starter: write the three backward functions declared in lab.h. Each throws "not implemented
// yet" until you replace its body. Run the tests with `shardscope lab 1`.
#include "labs/01-autograd/lab.h"

#include <cmath>

#include "labs/common/lab_support.h"

namespace shardscope::labs {

std::vector<double> gelu_backward(const std::vector<double>& /*x*/,
                                  const std::vector<double>& /*dy*/) {
  // TODO(task 1): dx[i] = dy[i] * gelu'(x[i]) for the tanh form.
  //   u = sqrt(2/pi) (x + 0.044715 x^3),  t = tanh(u)
  //   gelu(x) = 0.5 x (1 + t): a product of x and 0.5 (1 + t), so the product rule gives two terms.
  //   d tanh(u)/du = 1 - t^2,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
  // sqrt(2/pi) = 0.79788456080286535588.
  not_implemented("gelu_backward");
}

LayerNormGrads layernorm_backward(const std::vector<double>& /*x*/,
                                  const std::vector<double>& /*gamma*/,
                                  const std::vector<double>& /*dy*/, std::int64_t /*rows*/,
                                  std::int64_t /*h*/, double /*eps*/) {
  // TODO(task 2): for each row r (elements r * h .. r * h + h - 1):
  //   1. recompute mean and rstd = 1 / sqrt(var + eps) (biased variance: divide by h);
  //   2. xhat_j = (x_j - mean) rstd and dxhat_j = dy_j gamma_j;
  //   3. dbeta_j += dy_j and dgamma_j += dy_j xhat_j (parameter gradients sum over the rows);
  //   4. dx_j = rstd (dxhat_j - mean_k(dxhat_k) - xhat_j mean_k(dxhat_k xhat_k)).
  // The two row means in step 4 are the gradient through the mean and through the variance.
  not_implemented("layernorm_backward");
}

std::vector<double> softmax_backward(const std::vector<double>& /*y*/,
                                     const std::vector<double>& /*dy*/, std::int64_t /*rows*/,
                                     std::int64_t /*n*/) {
  // TODO(task 3): per row, dx_j = y_j (dy_j - sum_k y_k dy_k).
  // The Jacobian is dy_j/dx_i = y_j (delta_ij - y_i). Causal rows need no special case: where
  // the mask hid a key, y is exactly 0 and so is dx (README, "Causal masking").
  not_implemented("softmax_backward");
}

}  // namespace shardscope::labs
