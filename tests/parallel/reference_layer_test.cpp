// The single-device Transformer layer on the reference backend against the same layer on the CPU
// backend: forward, a cross-entropy-free loss (sum of the output times a fixed random tensor),
// backward, then the loss, the output, the input's gradient and every parameter's gradient, in f32
// and f64, with dropout on (the masks must agree for the gradients to), causal and not, s != a.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/ops.h"
#include "parallel/layers/transformer_layer.h"
#include "tests/autograd/reference_backend_testing.h"

namespace shardscope {
namespace {

using testing::NamedTensors;

// The layer's loss and gradients in ctx (the backend argument is ctx's own: the layer's ops take
// their context's backend).
NamedTensors layer_run(Context& ctx, DType dtype, const LayerConfig& base) {
  LayerConfig config = base;
  config.dtype = dtype;
  const TransformerLayer layer(config, make_layer_weights(ctx, config));
  Tensor x = Tensor::randn(ctx, {config.seq, config.batch, config.hidden}, 11, 1.0, dtype);
  x.set_requires_grad(true);
  const Tensor y = layer.forward(x);
  const Tensor w = Tensor::randn(ctx, y.shape(), 12, 1.0, dtype);
  const Tensor loss = sum(mul(y, w));
  loss.backward();
  NamedTensors out{{"loss", loss}, {"output", y}, {"input.grad", x.grad()}};
  for (const auto& [name, p] : layer.weights().named()) out.emplace_back(name + ".grad", p.grad());
  return out;
}

class LayerOnReference : public ::testing::TestWithParam<DType> {};

TEST_P(LayerOnReference, LossAndEveryGradientMatchTheCpuBackend) {
  for (const bool causal : {false, true}) {
    LayerConfig config;
    config.seq = 12;
    config.batch = 2;
    config.hidden = 48;
    config.heads = 6;
    config.dropout = 0.1;
    config.causal = causal;
    const testing::OpCase run = [config](Backend&, Context& ctx, DType dt) {
      return layer_run(ctx, dt, config);
    };
    Context cpu(0, Device::cpu());
    const testing::Mismatch m =
        testing::compare_with_reference(cpu.backend(), cpu, run, GetParam());
    EXPECT_EQ(m.count, 0) << (causal ? "causal " : "") << "layer [" << dtype_name(GetParam())
                          << "]: first " << m.first;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, LayerOnReference, ::testing::Values(DType::f32, DType::f64),
                         testing::DTypeName());

}  // namespace
}  // namespace shardscope
