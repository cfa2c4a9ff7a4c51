// A two-layer MLP trains: SGD on a fixed batch lowers the loss, for MSE regression and for
// cross-entropy classification.
#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "autograd/optim.h"

namespace shardscope {
namespace {

struct Mlp {
  Tensor w1, b1, w2, b2;
  Mlp(Context& ctx, std::int64_t in, std::int64_t hidden, std::int64_t out) {
    w1 = Tensor::parameter(Tensor::randn(ctx, {in, hidden}, 1, 0.5), "fc1.weight");
    b1 = Tensor::parameter(Tensor::zeros(ctx, {hidden}), "fc1.bias");
    w2 = Tensor::parameter(Tensor::randn(ctx, {hidden, out}, 2, 0.5), "fc2.weight");
    b2 = Tensor::parameter(Tensor::zeros(ctx, {out}), "fc2.bias");
  }
  Tensor forward(const Tensor& x) const {
    return add(matmul(gelu(add(matmul(x, w1), b1)), w2), b2);
  }
  std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
};

TEST(MlpTraining, MseLossFalls) {
  Context ctx;
  Mlp mlp(ctx, 8, 32, 4);
  Tensor x = Tensor::randn(ctx, {16, 8}, 3);
  Tensor y = Tensor::randn(ctx, {16, 4}, 4);
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor loss = mse_loss(mlp.forward(x), y);
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    sgd_step(mlp.parameters(), 0.05);
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
  for (const Tensor& p : mlp.parameters()) EXPECT_FALSE(p.grad().defined()) << p.name();
}

TEST(MlpTraining, CrossEntropyLossFalls) {
  Context ctx;
  Mlp mlp(ctx, 6, 24, 3);
  Tensor x = Tensor::randn(ctx, {12, 6}, 5);
  const std::vector<std::int64_t> labels = {0, 1, 2, 0, 1, 2, 2, 1, 0, 0, 1, 2};
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor loss = cross_entropy(mlp.forward(x), labels);
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    sgd_step(mlp.parameters(), 0.1);
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

}  // namespace
}  // namespace shardscope
