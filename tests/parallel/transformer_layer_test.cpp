// The single-device Transformer layer: saved activation bytes against Korthikanti et al. eq. 1,
// term by term, and training, on every backend (the cuda instances skip, naming what is missing,
// without a CUDA device).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <tuple>

#include "autograd/errors.h"
#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "parallel/layers/transformer_layer.h"
#include "parallel/models/memory_model.h"
#include "tests/backend_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using testing::TestBackend;

struct MemoryCase {
  std::int64_t s, b, h, a;
  double dropout;
  DType dtype;
};

// What gtest prints for the case (ctest's test name ends with it): otherwise the struct's bytes,
// padding included, which change from one discovery to the next.
void PrintTo(const MemoryCase& mc, std::ostream* out) {
  *out << "s=" << mc.s << " b=" << mc.b << " h=" << mc.h << " a=" << mc.a
       << " dropout=" << mc.dropout << " " << dtype_name(mc.dtype);
}

using MemoryOnBackend = std::tuple<MemoryCase, TestBackend>;

// "s8_b2_h16_a2_p10_f32_cuda": the shape, the dropout in percent, the dtype and the backend.
std::string memory_case_name(const ::testing::TestParamInfo<MemoryOnBackend>& info) {
  const MemoryCase& mc = std::get<0>(info.param);
  return "s" + std::to_string(mc.s) + "_b" + std::to_string(mc.b) + "_h" + std::to_string(mc.h) +
         "_a" + std::to_string(mc.a) + "_p" +
         std::to_string(static_cast<int>(std::lround(mc.dropout * 100))) + "_" +
         dtype_name(mc.dtype) + "_" + testing::backend_name(std::get<1>(info.param));
}

class LayerMemoryTest : public ::testing::TestWithParam<MemoryOnBackend> {
 protected:
  void SetUp() override { SHARDSCOPE_SKIP_IF_MISSING(testing::missing_devices(backend())); }
  TestBackend backend() const { return std::get<1>(GetParam()); }
};

TEST_P(LayerMemoryTest, SavedBytesEqualTheFormulaTermByTerm) {
  const MemoryCase mc = std::get<0>(GetParam());
  LayerConfig c;
  c.seq = mc.s;
  c.batch = mc.b;
  c.hidden = mc.h;
  c.heads = mc.a;
  c.dropout = mc.dropout;
  c.dtype = mc.dtype;
  Context ctx(0, testing::device_of(backend()));  // SetUp skipped a missing device
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

INSTANTIATE_TEST_SUITE_P(
    Shapes, LayerMemoryTest,
    ::testing::Combine(::testing::Values(MemoryCase{8, 2, 16, 2, 0.1, DType::f32},
                                         MemoryCase{16, 1, 32, 4, 0.2, DType::f32},
                                         MemoryCase{5, 3, 24, 3, 0.1, DType::f64},
                                         MemoryCase{12, 2, 32, 8, 0.0, DType::f32}),
                       testing::all_backends()),
    memory_case_name);

class TransformerLayerTest : public testing::BackendTest {};

TEST_P(TransformerLayerTest, LossFallsUnderSgdOnAFixedBatch) {
  LayerConfig c;
  c.seq = 8;
  c.batch = 2;
  c.hidden = 16;
  c.heads = 2;
  c.dropout = 0.0;
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

TEST_P(TransformerLayerTest, RejectsBadShapesWithTheRule) {
  LayerConfig c;
  c.hidden = 30;
  c.heads = 4;
  try {
    c.validate();
    FAIL() << "hidden 30 with 4 heads was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("hidden 30 must be divisible by heads 4"));
  }
  c.hidden = 32;
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

INSTANTIATE_TEST_SUITE_P(Backends, TransformerLayerTest, testing::all_backends(),
                         testing::BackendName());

}  // namespace
}  // namespace shardscope
