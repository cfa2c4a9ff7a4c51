// Observer::on_gemm: every matrix product a step runs reaches the observers once, with the
// descriptor the backend gets. A layer step's GEMMs (forward, and backward twice that) add up to
// three times its forward FLOPs (GemmFlops), for both presets; and those forward FLOPs are what the
// ops' shapes give (2 k per output element of each product), less the blocks above the diagonal
// that causal_matmul skips. bench/layer_bench's BM_LayerGemms times these products alone.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "autograd/flop_counter.h"
#include "autograd/gemm.h"
#include "autograd/observer.h"
#include "autograd/ops.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {
namespace {

class GemmLog : public Observer {
 public:
  void on_gemm(const GemmEvent& e) override {
    descs.push_back(*e.desc);
    dtypes.push_back(e.dtype);
    at.push_back({e.a, e.b, e.c});
  }
  double flops() const {
    double total = 0;
    for (const GemmDesc& d : descs) {
      total += 2.0 * static_cast<double>(d.m * d.n * d.k * d.batch);
    }
    return total;
  }
  std::vector<GemmDesc> descs;
  std::vector<DType> dtypes;
  std::vector<std::array<const void*, 3>> at;  // A, B, C
};

TEST(GemmEvent, AMatmulAndItsBackwardAreThreeProductsWithTheirShapes) {
  Context ctx(0);
  GemmLog log;
  ObserverGuard attach(ctx, log);
  Tensor a = Tensor::randn(ctx, Shape{2, 3, 4}, 1, 1.0, DType::f64).set_requires_grad(true);
  Tensor b = Tensor::parameter(Tensor::randn(ctx, Shape{4, 5}, 2, 1.0, DType::f64), "b");
  Tensor y = matmul(a, b);
  ASSERT_EQ(log.descs.size(), 1u);
  const GemmDesc& f = log.descs[0];
  EXPECT_EQ(f.m, 6);  // a's leading dims fold into m when b is shared
  EXPECT_EQ(f.n, 5);
  EXPECT_EQ(f.k, 4);
  EXPECT_EQ(f.batch, 1);
  EXPECT_EQ(log.dtypes[0], DType::f64);
  sum(y).backward();
  ASSERT_EQ(log.descs.size(), 3u);  // dA = dY B^T and dB = A^T dY
  EXPECT_EQ(log.flops(), 3 * 2.0 * 6 * 5 * 4);
}

TEST(GemmEvent, NamesWhereEachProductReadsAndWrites) {
  Context ctx(0);
  GemmLog log;
  ObserverGuard attach(ctx, log);
  Tensor a = Tensor::randn(ctx, Shape{6, 4}, 1, 1.0, DType::f64).set_requires_grad(true);
  Tensor b = Tensor::parameter(Tensor::randn(ctx, Shape{4, 5}, 2, 1.0, DType::f64), "b");
  Tensor y = matmul(a, b);
  ASSERT_EQ(log.at.size(), 1u);
  EXPECT_EQ(log.at[0][0], a.raw_data());
  EXPECT_EQ(log.at[0][1], b.raw_data());
  EXPECT_EQ(log.at[0][2], y.raw_data());
  sum(y).backward();
  ASSERT_EQ(log.at.size(), 3u);
  // dA = dY B^T reads B and writes what becomes a's gradient; dB = A^T dY reads A and writes b's.
  EXPECT_EQ(log.at[1][1], b.raw_data());
  EXPECT_EQ(log.at[1][2], a.grad().raw_data());
  EXPECT_EQ(log.at[2][0], a.raw_data());
  EXPECT_EQ(log.at[2][2], b.grad().raw_data());
  EXPECT_EQ(log.at[1][0], log.at[2][1]);  // both read dY
}

TEST(GemmEvent, ALayerStepsProductsAreThreeTimesItsForwardFlops) {
  for (const char* model : {"gpt", "llama"}) {
    LayerConfig c;
    c.seq = 12;
    c.batch = 2;
    c.hidden = 48;
    c.heads = 4;
    apply_model(model, c);
    if (std::string(model) == "llama") c.kv_heads = 2;
    c.validate();
    Context ctx(0);
    TransformerLayer layer(c, make_layer_weights(ctx, c));
    const Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3);
    GemmFlops counted;
    GemmLog log;
    ObserverGuard count(ctx, counted);
    ObserverGuard attach(ctx, log);
    sum(layer.forward(x)).backward();
    ASSERT_GT(counted.forward(), 0.0) << model;
    EXPECT_EQ(log.flops(), 3 * counted.forward()) << model;
  }
}

// 2 k per output element of each forward product, from the ops' shapes (as dense products).
class ShapeFlops : public Observer {
 public:
  void on_op_end(const OpEvent& e) override {
    const bool product =
        e.site.op == "matmul" || e.site.op == "gather_matmul" || e.site.op == "causal_matmul";
    if (e.site.phase != Phase::forward || !product || !e.inputs || !e.outputs) return;
    const Shape& a = e.inputs->front();
    for (const Shape& out : *e.outputs) {
      flops += 2.0 * static_cast<double>(a[a.rank() - 1]) * static_cast<double>(out.numel());
    }
  }
  double flops = 0;
};

TEST(GemmEvent, ForwardFlopsAreTheOpsShapesLessTheBlocksAboveTheDiagonal) {
  for (bool causal : {false, true}) {
    LayerConfig c;
    c.seq = 80;  // causal_matmul's blocks: 32, 32 and 16 queries
    c.batch = 2;
    c.hidden = 24;
    c.heads = 2;
    c.causal = causal;
    c.validate();
    Context ctx(0);
    TransformerLayer layer(c, make_layer_weights(ctx, c));
    const Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3);
    GemmFlops counted;
    ShapeFlops shapes;
    ObserverGuard count(ctx, counted);
    ObserverGuard attach(ctx, shapes);
    layer.forward(x);
    // Query block i sees the keys up to its end: 32 x 32 + 32 x 64 + 16 x 80 of the 80 x 80 pairs,
    // in each of the two products (scores, context) of every head, 2 d FLOPs per pair.
    const double skipped_pairs = causal ? 80.0 * 80 - (32 * 32 + 32 * 64 + 16 * 80) : 0.0;
    const double skipped = 2 * 2.0 * static_cast<double>(c.head_dim()) * skipped_pairs *
                           static_cast<double>(c.batch * c.heads);
    EXPECT_EQ(counted.forward(), shapes.flops - skipped) << "causal " << causal;
  }
}

}  // namespace
}  // namespace shardscope
