// The whole Transformer layer passes a finite-difference gradient check in f64, with dropout on
// (the Philox masks are fixed by the seed and step), for the input and all twelve parameters.
#include <gtest/gtest.h>

#include "autograd/gradcheck.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {
namespace {

LayerWeights weights_from(const std::vector<Tensor>& in) {
  LayerWeights w;
  Tensor* slots[] = {&w.ln1_weight,  &w.ln1_bias,  &w.qkv_weight, &w.qkv_bias,
                     &w.proj_weight, &w.proj_bias, &w.ln2_weight, &w.ln2_bias,
                     &w.fc1_weight,  &w.fc1_bias,  &w.fc2_weight, &w.fc2_bias};
  for (std::size_t i = 0; i < 12; ++i) *slots[i] = in[i + 1];
  return w;
}

TEST(LayerGradcheck, InputAndEveryParameterWithDropout) {
  LayerConfig c;
  c.seq = 4;
  c.batch = 2;
  c.hidden = 8;
  c.heads = 2;
  c.dropout = 0.2;
  c.dtype = DType::f64;
  Context ctx;
  std::vector<Tensor> inputs{
      Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 21, 1.0, DType::f64).set_requires_grad(true)};
  std::uint64_t seed = 100;
  // Larger weights than training uses (0.02), so every path contributes visibly to the check.
  for (const auto& [name, p] : make_layer_weights(ctx, c).named()) {
    const bool is_ln_weight = name == "ln1.weight" || name == "ln2.weight";
    Tensor v = Tensor::randn(ctx, p.shape(), ++seed, 0.5, DType::f64, is_ln_weight ? 1.0 : 0.0);
    inputs.push_back(Tensor::parameter(v, name));
  }
  const GradcheckResult r = gradcheck(
      [&c](const std::vector<Tensor>& in) {
        TransformerLayer layer(c, weights_from(in));
        return layer.forward(in[0]);
      },
      inputs);
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_LT(r.max_abs_error, 1e-6) << r.report;
}

}  // namespace
}  // namespace shardscope
