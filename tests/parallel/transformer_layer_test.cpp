// The single-device Transformer layer: saved activation bytes against Korthikanti et al. eq. 1,
// term by term, and training.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "autograd/errors.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "parallel/memory_model.h"
#include "parallel/transformer_layer.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;

struct MemoryCase {
  std::int64_t s, b, h, a;
  double dropout;
  DType dtype;
};

class LayerMemoryTest : public ::testing::TestWithParam<MemoryCase> {};

TEST_P(LayerMemoryTest, SavedBytesEqualTheFormulaTermByTerm) {
  const MemoryCase mc = GetParam();
  LayerConfig c;
  c.seq = mc.s;
  c.batch = mc.b;
  c.hidden = mc.h;
  c.heads = mc.a;
  c.dropout = mc.dropout;
  c.dtype = mc.dtype;
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 7, 1.0, c.dtype);
  Tensor y = layer.forward(x);

  // The paper's eq. 1 written out independently of the term list.
  const double A = static_cast<double>(dtype_size(c.dtype)), M = 1.0;
  const double sbh = static_cast<double>(c.seq * c.batch * c.hidden);
  const double as2b = static_cast<double>(c.heads * c.seq * c.seq * c.batch);
  const double eq1 =
      c.dropout > 0 ? sbh * (16 * A + 2 * M) + as2b * (2 * A + M) : sbh * 16 * A + as2b * A;
  EXPECT_EQ(static_cast<double>(ledger.saved_activation_bytes(0)), eq1);
  EXPECT_EQ(static_cast<double>(ledger.extras_bytes(0)),
            4.0 * A * static_cast<double>(c.seq * c.batch));

  const ActivationModel model = single_device_activation_model(c);
  EXPECT_EQ(model.total_bytes, eq1);
  for (const MeasuredTerm& term : measure_terms(model, ledger, 0)) {
    EXPECT_EQ(term.measured_bytes, term.model_bytes)
        << term.what << " (" << term.scope << "/" << term.op << ")";
  }
  // Backward releases every saved tensor.
  sum(y).backward();
  EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
  EXPECT_EQ(ledger.extras_bytes(), 0u);
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerMemoryTest,
                         ::testing::Values(MemoryCase{8, 2, 16, 2, 0.1, DType::f32},
                                           MemoryCase{16, 1, 32, 4, 0.2, DType::f32},
                                           MemoryCase{5, 3, 24, 3, 0.1, DType::f64},
                                           MemoryCase{12, 2, 32, 8, 0.0, DType::f32}));

TEST(TransformerLayer, LossFallsUnderSgdOnAFixedBatch) {
  LayerConfig c;
  c.seq = 8;
  c.batch = 2;
  c.hidden = 16;
  c.heads = 2;
  c.dropout = 0.0;
  Context ctx;
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 11);
  Tensor target = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 12);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    Tensor loss = mse_loss(layer.forward(x), target);
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    sgd_step(layer.parameters(), 0.5);
  }
  EXPECT_LT(last, 0.8 * first) << "first loss " << first << ", last " << last;
}

TEST(TransformerLayer, RejectsBadShapesWithTheRule) {
  LayerConfig c;
  c.hidden = 30;
  c.heads = 4;
  try {
    c.validate();
    FAIL() << "hidden 30 with 4 heads was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--hidden 30 must be divisible by --heads 4"));
  }
  c.hidden = 32;
  Context ctx;
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor wrong = Tensor::randn(ctx, {c.seq, c.batch, 16}, 1);
  try {
    layer.forward(wrong);
    FAIL() << "a [s, b, 16] input was accepted by an h = 32 layer";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("[16, 2, 32]"));
    EXPECT_THAT(e.what(), HasSubstr("[16, 2, 16]"));
  }
}

}  // namespace
}  // namespace shardscope
