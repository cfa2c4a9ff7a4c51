// The Check panel and the heat map on hand-made snapshots: colours by result, and a full tensor
// assembled from shards by placement, folded to the cell limit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

CheckRow row(const std::string& name, bool available, double abs_err, double rel_err, bool passed) {
  CheckRow r;
  r.name = name;
  r.available = available;
  r.failed = passed ? 0 : 3;
  r.elements = 64;
  r.max_abs_err = abs_err;
  r.max_rel_err = rel_err;
  r.passed = passed;
  return r;
}

TEST(CheckView, ColoursRowsByResultAndSummarises) {
  Snapshot s;
  s.tolerance = {1e-3, 1e-4};
  s.checks = {row("output", true, 2.5e-7, 1.25e-7, true),
              row("attn.qkv.weight.grad", true, 0.5, 0.3, false),
              row("mlp.fc1.weight.grad", false, 0, 0, true),
              row("input.grad", true, 1.0, std::numeric_limits<double>::quiet_NaN(), false)};
  const CheckView v = check_view(s);
  ASSERT_EQ(v.rows.size(), 4u);
  EXPECT_EQ(v.rows[0].name, "output");
  EXPECT_EQ(v.rows[0].abs_err, "2.50e-7");
  EXPECT_EQ(v.rows[0].rel_err, "1.25e-7");
  EXPECT_EQ(v.rows[0].failed, "0 of 64");
  EXPECT_EQ(v.rows[1].failed, "3 of 64");
  EXPECT_EQ(v.rows[0].color, theme::kPassed);
  EXPECT_EQ(v.rows[1].color, theme::kFailed);  // elements out of tolerance: red
  EXPECT_EQ(v.rows[1].rel_err, "3.00e-1");
  EXPECT_EQ(v.rows[2].color, theme::kPending);
  EXPECT_EQ(v.rows[2].abs_err, "pending");
  EXPECT_EQ(v.rows[3].color, theme::kFailed);  // a NaN never passes
  EXPECT_EQ(v.summary,
            "3 of 4 checked, 2 out of |a - b| <= 1e-4 max|b| + 1e-3 |b|: attn.qkv.weight.grad, "
            "input.grad");
}

TEST(CheckView, ARowPassesByItsElementCountNotByItsNormwiseError) {
  Snapshot s;
  s.tolerance = {1e-3, 1e-3};
  // A normwise error above rtol with every element within its bound passes (a small element's
  // relative error is not a failure), and one element out of tolerance fails.
  s.checks = {row("output", true, 1e-3, 2e-3, true)};
  EXPECT_EQ(check_view(s).rows[0].color, theme::kPassed);
  s.checks = {row("output", true, 1e-9, 1e-9, false)};
  EXPECT_EQ(check_view(s).rows[0].color, theme::kFailed);
  s.checks = {row("output", true, 0, 0, true)};
  const CheckView v = check_view(s);
  EXPECT_EQ(v.rows[0].color, theme::kPassed);
  EXPECT_EQ(v.rows[0].abs_err, "0");
  EXPECT_EQ(v.summary, "1 of 1 checked, all within |a - b| <= 1e-3 max|b| + 1e-3 |b|");
}

TEST(CheckView, WithoutChecksShowsTheSnapshotsNote) {
  Snapshot s;
  s.check_note = "a trace holds no tensor values: compare dumps with `shardscope check`";
  const CheckView v = check_view(s);
  EXPECT_TRUE(v.rows.empty());
  EXPECT_EQ(v.summary, s.check_note);
}

// A [rows, cols] tensor with values f(i, j), split into `ranks` pieces by `placement` (Partial:
// rank 0 holds half of each value, the others share the other half: with 2 or 3 ranks the parts
// are powers of two, so their sum is exact).
TensorValues make_tensor(const std::string& name, std::int64_t rows, std::int64_t cols,
                         Placement placement, int ranks, float (*f)(std::int64_t, std::int64_t)) {
  TensorValues t;
  t.name = name;
  t.global = Shape{rows, cols};
  t.placement = placement;
  const int dim = placement.dim < 0 ? placement.dim + 2 : placement.dim;
  for (int r = 0; r < ranks; ++r) {
    std::int64_t r0 = 0, r1 = rows, c0 = 0, c1 = cols;
    if (placement.is_shard() && dim == 0) {
      r0 = rows / ranks * r;
      r1 = r0 + rows / ranks;
    }
    if (placement.is_shard() && dim == 1) {
      c0 = cols / ranks * r;
      c1 = c0 + cols / ranks;
    }
    std::vector<float> v;
    for (std::int64_t i = r0; i < r1; ++i) {
      for (std::int64_t j = c0; j < c1; ++j) {
        const float x = f(i, j);
        v.push_back(placement.kind == Placement::Kind::partial
                        ? x * (r == 0 ? 0.5f : 0.5f / static_cast<float>(ranks - 1))
                        : x);
      }
    }
    t.local_shapes.push_back(Shape{r1 - r0, c1 - c0});
    t.local.push_back(std::move(v));
  }
  return t;
}

float ramp(std::int64_t i, std::int64_t j) {
  return static_cast<float>(i * 10 + j) - 20.0f;  // -20 .. 39 for [6, 10]
}

std::vector<Color> colours(const HeatMap& m) {
  std::vector<Color> out;
  for (const auto& [rect, color] : m.cells) out.push_back(color);
  return out;
}

// The assembled heat map equals the one of the full tensor given whole (Replicate on one rank).
void expect_assembles(Placement placement, int ranks) {
  SCOPED_TRACE(placement.str());
  Snapshot s;
  s.tensors.push_back(make_tensor("sharded", 6, 10, placement, ranks, ramp));
  s.tensors.push_back(make_tensor("whole", 6, 10, Placement::replicate(), 1, ramp));
  const std::optional<HeatMap> got = heat_map(s, "sharded", -1, {400, 300});
  const std::optional<HeatMap> want = heat_map(s, "whole", -1, {400, 300});
  ASSERT_TRUE(got && want);
  ASSERT_EQ(got->cells.size(), 60u);
  EXPECT_EQ(colours(*got), colours(*want));
  EXPECT_NEAR(got->min_value, -20.0, 1e-4);
  EXPECT_NEAR(got->max_value, 39.0, 1e-4);
  EXPECT_EQ(got->cells[59].second, theme::kHeatPositive);  // the largest |x| is an end
  EXPECT_EQ(got->cells[20].second, theme::kHeatZero);      // (2, 0) is exactly 0
  EXPECT_NE(got->title.find("(full)"), std::string::npos) << got->title;
}

TEST(HeatMap, AssemblesShardsAndSumsPartials) {
  expect_assembles(Placement::shard(0), 3);
  expect_assembles(Placement::shard(1), 2);
  expect_assembles(Placement{Placement::Kind::shard, -1}, 5);
  expect_assembles(Placement::partial(), 3);
  expect_assembles(Placement::replicate(), 2);
}

TEST(HeatMap, OutlinesEachRanksSliceOfTheFullTensor) {
  Snapshot s;
  s.tensors.push_back(make_tensor("rows", 6, 10, Placement::shard(0), 2, ramp));
  const HeatMap m = *heat_map(s, "rows", -1, {400, 300});
  ASSERT_EQ(m.shard_outlines.size(), 8u);  // four sides per rank
  EXPECT_EQ(m.shard_outlines[0].color, theme::rank_color(0));
  EXPECT_EQ(m.shard_outlines[4].color, theme::rank_color(1));
  const float middle = (m.frame.y0 + m.frame.y1) / 2;
  EXPECT_NEAR(m.shard_outlines[4].y0, middle, 1e-3);  // rank 1's top edge
  const HeatMap local = *heat_map(s, "rows", 1, {400, 300});
  EXPECT_EQ(local.cells.size(), 30u);
  EXPECT_TRUE(local.shard_outlines.empty());
  EXPECT_NE(local.title.find("rank 1, local [3, 10]"), std::string::npos) << local.title;
  EXPECT_NEAR(local.min_value, 10.0, 1e-4);  // rows 3..5 of the ramp
}

TEST(HeatMap, FoldsALargeTensorKeepingTheLargestMagnitude) {
  Snapshot s;
  TensorValues t =
      make_tensor("big", 500, 300, Placement::shard(0), 2,
                  [](std::int64_t i, std::int64_t j) { return (i + j) % 7 == 0 ? 0.5f : 0.25f; });
  t.local[1][static_cast<std::size_t>(10 * 300 + 150)] = -1000.0f;  // row 260, column 150
  s.tensors.push_back(std::move(t));
  for (PanelSize size : {PanelSize{800, 600}, PanelSize{200, 900}, PanelSize{50, 40}}) {
    const HeatMap m = *heat_map(s, "big", -1, size);
    EXPECT_EQ(m.cells.size(), 96u * 96u);
    EXPECT_DOUBLE_EQ(m.min_value, -1000.0);
    EXPECT_DOUBLE_EQ(m.max_value, 0.5);
    EXPECT_GE(m.frame.x0, 0);
    EXPECT_GE(m.frame.y0, 0);
    EXPECT_LE(m.frame.x1, size.width);
    EXPECT_LE(m.frame.y1, size.height);
    int negative = 0;
    for (const auto& [rect, color] : m.cells) {
      EXPECT_GE(rect.x0, m.frame.x0 - 1e-3);
      EXPECT_GE(rect.y0, m.frame.y0 - 1e-3);
      EXPECT_LE(rect.x1, m.frame.x1 + 1e-3);
      EXPECT_LE(rect.y1, m.frame.y1 + 1e-3);
      EXPECT_GT(rect.width(), 0);
      negative += color == theme::kHeatNegative;
    }
    EXPECT_EQ(negative, 1) << "the spike survives folding, with its sign";
    EXPECT_NE(m.title.find("folded"), std::string::npos) << m.title;
  }
}

TEST(HeatMap, NothingToShowWithoutValues) {
  Snapshot s;
  EXPECT_FALSE(heat_map(s, "output", -1, {300, 200}));
  TensorValues t = make_tensor("output", 4, 4, Placement::shard(0), 2, ramp);
  t.local[1].clear();  // not yet known on rank 1
  s.tensors.push_back(t);
  EXPECT_FALSE(heat_map(s, "output", -1, {300, 200}));
  EXPECT_FALSE(heat_map(s, "output", 1, {300, 200}));
  EXPECT_TRUE(heat_map(s, "output", 0, {300, 200}));
  EXPECT_FALSE(heat_map(s, "output", 5, {300, 200}));
  const HeatMap tiny = *heat_map(s, "output", 0, {0, 0});
  EXPECT_TRUE(tiny.cells.empty());
}

TEST(HeatMap, AMismatchedSizeNamesTheTensorAndRank) {
  Snapshot s;
  TensorValues t = make_tensor("output", 4, 4, Placement::shard(0), 2, ramp);
  t.local[0].pop_back();
  s.tensors.push_back(t);
  try {
    heat_map(s, "output", -1, {300, 200});
    FAIL() << "expected ArgumentError";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("output on rank 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardscope::viz
