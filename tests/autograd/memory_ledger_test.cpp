// MemoryLedger: live and peak bytes per category, saved bytes counted once per storage and never
// for parameters, extras kept apart, and what each op keeps for backward.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <string>
#include <utility>

#include "autograd/memory_ledger.h"
#include "autograd/ops.h"

namespace shardscope {
namespace {

std::size_t f32_bytes(std::int64_t n) {
  return static_cast<std::size_t>(n) * 4;
}

TEST(MemoryLedger, ParametersGradientsAndActivationsByCategory) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor w = Tensor::parameter(Tensor::randn(ctx, {4, 8}, 1), "w");
  EXPECT_EQ(ledger.live(MemoryCategory::parameter), f32_bytes(32));
  {
    Tensor x = Tensor::randn(ctx, {3, 4}, 2);
    EXPECT_EQ(ledger.live(MemoryCategory::activation), f32_bytes(12));
    Tensor y = gelu(matmul(x, w));  // matmul saves x (w needs grad), not w; gelu saves its input
    EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(12) + f32_bytes(24));
    EXPECT_EQ(ledger.live(MemoryCategory::saved_activation), f32_bytes(36));
    sum(y).backward();
    EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
    EXPECT_EQ(ledger.live(MemoryCategory::saved_activation), 0u);
    EXPECT_EQ(ledger.live(MemoryCategory::gradient), f32_bytes(32));
  }
  w.zero_grad();
  EXPECT_EQ(ledger.live(MemoryCategory::gradient), 0u);
  EXPECT_EQ(ledger.live(MemoryCategory::activation), 0u);
  EXPECT_EQ(ledger.live(MemoryCategory::workspace), 0u);
  EXPECT_EQ(ledger.live_total(), f32_bytes(32));
  EXPECT_GE(ledger.peak_total(), f32_bytes(32 + 12 + 24 + 32));
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak_total(), ledger.live_total());
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

TEST(MemoryLedger, AStorageSavedTwiceOrThroughAViewCountsOnce) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor x = Tensor::randn(ctx, {2, 6}, 3).set_requires_grad(true);
  Tensor a = gelu(x);
  Tensor b = gelu(x);                   // x saved a second time
  Tensor c = gelu(reshape(x, {3, 4}));  // a view of x's storage, saved a third time
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(12));
  EXPECT_EQ(ledger.live(MemoryCategory::saved_activation), f32_bytes(12));
  const auto sites = ledger.saved_by_site();
  ASSERT_EQ(sites.size(), 1u);  // all under the first saver
  EXPECT_EQ(sites[0].op, "gelu");
  EXPECT_EQ(sites[0].bytes, f32_bytes(12));
  sum(a).backward();  // one of three saves released: still saved
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(12));
  sum(b).backward();
  sum(c).backward();
  EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
  EXPECT_EQ(ledger.live(MemoryCategory::saved_activation), 0u);
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

TEST(MemoryLedger, MatmulKeepsOnlyTheOperandTheOtherGradientNeeds) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor x = Tensor::randn(ctx, {5, 4}, 4).set_requires_grad(true);
  Tensor constant = Tensor::randn(ctx, {4, 3}, 5);  // no grad
  Tensor y = matmul(x, constant);                   // dx needs the constant, nobody needs x
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(12));
  sum(y).backward();
  EXPECT_TRUE(x.grad().defined());
}

TEST(MemoryLedger, LayerNormStatisticsAreExtrasAndGammaIsNotCounted) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor gamma = Tensor::parameter(Tensor::full(ctx, {8}, 1.0), "ln.weight");
  Tensor beta = Tensor::parameter(Tensor::zeros(ctx, {8}), "ln.bias");
  Tensor x = Tensor::randn(ctx, {3, 5, 8}, 6);
  Tensor y;
  {
    LayerGuard layer(ctx, 2);
    ScopeGuard scope(ctx, "ln1");
    y = layernorm(x, gamma, beta);
  }
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(120));
  EXPECT_EQ(ledger.saved_activation_bytes(2), f32_bytes(120));
  EXPECT_EQ(ledger.saved_activation_bytes(0), 0u);
  EXPECT_EQ(ledger.extras_bytes(), f32_bytes(2 * 15));  // mean and rstd per row
  EXPECT_EQ(ledger.live(MemoryCategory::saved_extra), f32_bytes(30));
  const auto sites = ledger.saved_by_site(2);
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_EQ(sites[0].scope, "ln1");
  EXPECT_EQ(sites[0].role, SaveRole::activation);
  EXPECT_EQ(sites[1].role, SaveRole::extra);
  EXPECT_EQ(sites[1].layer, 2);
}

TEST(MemoryLedger, RmsNormSavesItsInputAndOnlyRstdAsAnExtra) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor gamma = Tensor::parameter(Tensor::full(ctx, {8}, 1.0), "norm.weight");
  Tensor x = Tensor::randn(ctx, {3, 5, 8}, 6);
  Tensor y;
  {
    LayerGuard layer(ctx, 1);
    ScopeGuard scope(ctx, "norm1");
    y = rmsnorm(x, gamma);
  }
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(120));  // x; gamma is not counted
  EXPECT_EQ(ledger.saved_activation_bytes(1), f32_bytes(120));
  EXPECT_EQ(ledger.extras_bytes(), f32_bytes(15));  // rstd per row, no mean
  EXPECT_EQ(ledger.live(MemoryCategory::saved_extra), f32_bytes(15));
  const auto sites = ledger.saved_by_site(1);
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_EQ(sites[0].op, "rmsnorm");
  EXPECT_EQ(sites[0].scope, "norm1");
  EXPECT_EQ(sites[0].role, SaveRole::activation);
  EXPECT_EQ(sites[0].bytes, f32_bytes(120));
  EXPECT_EQ(sites[1].op, "rmsnorm");
  EXPECT_EQ(sites[1].role, SaveRole::extra);
  EXPECT_EQ(sites[1].bytes, f32_bytes(15));
  sum(y).backward();
  EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
  EXPECT_EQ(ledger.extras_bytes(), 0u);
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

TEST(MemoryLedger, SwigluSavesItsInputNotItsOutput) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor x = Tensor::randn(ctx, {3, 2, 10}, 8).set_requires_grad(true);
  Tensor y = swiglu(x);  // [3, 2, 5]
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(60));
  EXPECT_EQ(ledger.extras_bytes(), 0u);
  const auto sites = ledger.saved_by_site();
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].op, "swiglu");
  EXPECT_EQ(sites[0].role, SaveRole::activation);
  sum(y).backward();
  EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
  EXPECT_EQ(x.grad().shape(), x.shape());
}

// RoPE's backward is the inverse rotation, whose angles come from the settings: nothing saved.
TEST(MemoryLedger, RopeSavesNothing) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor x = Tensor::randn(ctx, {4, 2, 3, 8}, 10).set_requires_grad(true);
  Tensor y = rope(x, 0, 5);
  EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
  EXPECT_EQ(ledger.extras_bytes(), 0u);
  EXPECT_EQ(ledger.live(MemoryCategory::saved_activation), 0u);
  EXPECT_TRUE(ledger.saved_by_site().empty());
  sum(y).backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

TEST(MemoryLedger, TensorsFromBeforeAttachingCountOnlyWhileSaved) {
  Context ctx;
  Tensor x = Tensor::randn(ctx, {4, 4}, 7).set_requires_grad(true);
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor y = gelu(x);
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(16));
  EXPECT_EQ(ledger.live(MemoryCategory::saved_activation), f32_bytes(16));
  sum(y).backward();
  EXPECT_EQ(ledger.live(MemoryCategory::saved_activation), 0u);
  EXPECT_EQ(ledger.live(MemoryCategory::activation), f32_bytes(16));  // y itself
}

TEST(MemoryLedger, ASavedTensorMadeAParameterLaterIsStillReleased) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor x = Tensor::randn(ctx, {4}, 9).set_requires_grad(true);
  Tensor y = gelu(x);
  x.storage()->set_category(MemoryCategory::parameter);
  EXPECT_EQ(ledger.saved_activation_bytes(), f32_bytes(4));
  sum(y).backward();
  EXPECT_EQ(ledger.saved_activation_bytes(), 0u);
  EXPECT_EQ(ledger.live(MemoryCategory::parameter), f32_bytes(4));
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

TEST(MemoryLedger, TwoRanksShareALedgerWithoutMixingTheirStorages) {
  Context rank0(0), rank1(1);
  MemoryLedger ledger;
  ObserverGuard attach0(rank0, ledger), attach1(rank1, ledger);
  {
    Tensor a = Tensor::zeros(rank0, {25});  // both are storage 1 of their context
    Tensor b = Tensor::zeros(rank1, {75});
    EXPECT_EQ(ledger.live(MemoryCategory::activation), f32_bytes(100));
  }
  EXPECT_EQ(ledger.live_total(), 0u);
  EXPECT_EQ(ledger.accounting_errors(), 0u);
}

// A forward and backward with every kind of memory event, under `observer`: parameters, a matmul
// and GeLUs that save their inputs, a LayerNorm with its extras, a view.
void forward_and_backward_watched_by(Observer& observer) {
  Context ctx;
  ObserverGuard attach(ctx, observer);
  Tensor w = Tensor::parameter(Tensor::randn(ctx, {8, 8}, 1), "w");
  Tensor g = Tensor::parameter(Tensor::randn(ctx, {8}, 2), "g");
  Tensor b = Tensor::parameter(Tensor::randn(ctx, {8}, 3), "b");
  Tensor x = Tensor::randn(ctx, {4, 8}, 4).set_requires_grad(true);
  Tensor h = layernorm(gelu(matmul(x, w)), g, b, 1e-5);
  Tensor y = gelu(reshape(h, {8, 4}));
  sum(mul(y, y)).backward();
}

// LiveBytes alone (what the trace recorder keeps per rank) counts as the ledger does, at every
// event of a forward and backward with saves, views, extras and parameters.
TEST(MemoryLedger, LiveBytesAloneCountAsTheLedgerDoes) {
  struct Compare final : Observer {
    MemoryLedger ledger;
    LiveBytes bytes;
    int events = 0;
    void check() {
      ++events;
      ASSERT_EQ(bytes.live(), ledger.live_all()) << "event " << events;
      ASSERT_EQ(bytes.peak_total(), ledger.peak_total()) << "event " << events;
      ASSERT_EQ(bytes.accounting_errors(), 0u) << "event " << events;
    }
    void on_alloc(const StorageEvent& e) override {
      ledger.on_alloc(e), bytes.on_alloc(e), check();
    }
    void on_free(const StorageEvent& e) override { ledger.on_free(e), bytes.on_free(e), check(); }
    void on_recategorize(const StorageEvent& e) override {
      ledger.on_recategorize(e), bytes.on_recategorize(e), check();
    }
    void on_save(const SaveEvent& e) override { ledger.on_save(e), bytes.on_save(e), check(); }
    void on_release(const SaveEvent& e) override {
      ledger.on_release(e), bytes.on_release(e), check();
    }
  } compare;
  forward_and_backward_watched_by(compare);
  EXPECT_GT(compare.events, 20);
}

// take_changed brings a copy of the live bytes up to date: followed through it alone (as the trace
// recorder follows them) they equal live() at every event of a forward and backward with saves,
// extras and parameters, and a second call finds nothing to change.
TEST(MemoryLedger, TakeChangedBringsACopyOfTheLiveBytesUpToDate) {
  struct Follow final : Observer {
    LiveBytes bytes;
    LiveBytes::Bytes followed{};
    std::uint8_t seen = 0;  // every category take_changed has changed
    int events = 0;
    void check() {
      ++events;
      seen |= bytes.take_changed(followed);
      ASSERT_EQ(followed, bytes.live()) << "event " << events;
      LiveBytes::Bytes zeros{};  // nothing is left to bring up to date, even from zero
      ASSERT_EQ(bytes.take_changed(zeros), 0) << "event " << events;
    }
    void on_alloc(const StorageEvent& e) override { bytes.on_alloc(e), check(); }
    void on_free(const StorageEvent& e) override { bytes.on_free(e), check(); }
    void on_recategorize(const StorageEvent& e) override { bytes.on_recategorize(e), check(); }
    void on_save(const SaveEvent& e) override { bytes.on_save(e), check(); }
    void on_release(const SaveEvent& e) override { bytes.on_release(e), check(); }
  } follow;
  forward_and_backward_watched_by(follow);
  EXPECT_GT(follow.events, 20);
  for (const MemoryCategory c :
       {MemoryCategory::activation, MemoryCategory::parameter, MemoryCategory::saved_activation,
        MemoryCategory::saved_extra, MemoryCategory::gradient}) {
    EXPECT_NE(follow.seen & (1u << static_cast<unsigned>(c)), 0u)
        << "never changed: " << memory_category_name(c);
  }
}

TEST(MemoryLedger, AllocationsAreAttributedToTheOpAndScope) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor x = Tensor::randn(ctx, {2, 3}, 8);
  {
    ScopeGuard scope(ctx, "mlp");
    Tensor y = gelu(x);
  }
  bool found = false;
  for (const auto& a : ledger.allocations_by_op()) {
    if (a.scope == "mlp" && a.op == "gelu") {
      found = true;
      EXPECT_EQ(a.bytes, f32_bytes(6));
      EXPECT_EQ(a.count, 1u);
    }
  }
  EXPECT_TRUE(found);
}

// One entry per (scope, op) pair: the same op under 40 scopes, two ops under each, and each
// scope entered twice (the second time after all the others, so its entry is found again rather
// than being the last one used).
TEST(MemoryLedger, AllocationsOfOneOpUnderManyScopesStayApart) {
  Context ctx;
  MemoryLedger ledger;
  ObserverGuard attach(ctx, ledger);
  Tensor x = Tensor::randn(ctx, {2, 3}, 8);
  constexpr int kScopes = 40;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kScopes; ++i) {
      ScopeGuard scope(ctx, "block" + std::to_string(i));
      Tensor y = gelu(x);
      for (int k = 0; k <= i % 3; ++k) y = add(y, x);  // 1 to 3 adds
    }
  }
  std::map<std::pair<std::string, std::string>, MemoryLedger::OpAllocations> by_key;
  for (const auto& a : ledger.allocations_by_op()) {
    EXPECT_TRUE(by_key.emplace(std::make_pair(a.scope, a.op), a).second) << a.scope << "/" << a.op;
  }
  for (int i = 0; i < kScopes; ++i) {
    const std::string scope = "block" + std::to_string(i);
    SCOPED_TRACE(scope);
    const auto gelu_at = by_key.find({scope, "gelu"});
    const auto add_at = by_key.find({scope, "add"});
    ASSERT_NE(gelu_at, by_key.end());
    ASSERT_NE(add_at, by_key.end());
    EXPECT_EQ(gelu_at->second.count, 2u);
    EXPECT_EQ(gelu_at->second.bytes, 2 * f32_bytes(6));
    const auto adds = static_cast<std::size_t>(2 * (1 + i % 3));
    EXPECT_EQ(add_at->second.count, adds);
    EXPECT_EQ(add_at->second.bytes, adds * f32_bytes(6));
  }
}

}  // namespace
}  // namespace shardscope
