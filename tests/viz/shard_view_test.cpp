// The shard view on real recorded runs: each rank's piece where its slice lies, in its colour,
// in the style of its placement, and everything inside the panel at any size.
#include <gtest/gtest.h>

#include <set>

#include "tests/viz/viz_testing.h"
#include "viz/model/layout.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

using testing::record_run;

const LogicalTensorView& tensor_named(const ShardView& v, const std::string& name) {
  for (const LogicalTensorView& t : v.tensors) {
    if (t.name == name) return t;
  }
  std::string names;
  for (const LogicalTensorView& t : v.tensors) names += " \"" + t.name + "\"";
  throw ArgumentError("no tensor \"" + name + "\" in the shard view of " + v.title + "; it has" +
                      names);
}

bool has_note(const ShardView& v, const std::string& part) {
  for (const Label& l : v.notes) {
    if (l.text.find(part) != std::string::npos) return true;
  }
  return false;
}

// Every rank's piece a band of rows (dim = rows) or of columns, in rank order, tiling the frame.
void expect_bands(const LogicalTensorView& t, int ranks, bool rows, PieceStyle style) {
  SCOPED_TRACE(t.name);
  ASSERT_EQ(t.pieces.size(), static_cast<std::size_t>(ranks));
  std::set<Color> fills;
  const float step = (rows ? t.frame.height() : t.frame.width()) / static_cast<float>(ranks);
  for (int r = 0; r < ranks; ++r) {
    const ShardPiece& p = t.pieces[static_cast<std::size_t>(r)];
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.style, style);
    fills.insert(p.fill);
    const Color expected = style == PieceStyle::shard
                               ? theme::rank_color(r)
                               : with_alpha(theme::rank_color(r), theme::kSharedPieceAlpha);
    EXPECT_EQ(p.fill, expected);
    if (rows) {
      EXPECT_NEAR(p.rect.y0, t.frame.y0 + step * static_cast<float>(r), 1e-3);
      EXPECT_NEAR(p.rect.height(), step, 1e-3);
      EXPECT_FLOAT_EQ(p.rect.width(), t.frame.width());
    } else {
      EXPECT_NEAR(p.rect.x0, t.frame.x0 + step * static_cast<float>(r), 1e-3);
      EXPECT_NEAR(p.rect.width(), step, 1e-3);
      EXPECT_FLOAT_EQ(p.rect.height(), t.frame.height());
    }
  }
  EXPECT_EQ(fills.size(), static_cast<std::size_t>(ranks)) << "rank colours must differ";
}

TEST(ShardView, TpSpAllGatherBeforeQkvShowsSequenceShardsThenTheGatheredInput) {
  Replay r(record_run("tp-sp", 4));
  ASSERT_TRUE(r.next_collective());
  const ShardView v = shard_view(r.snapshot(), 1, {900, 600});
  EXPECT_NE(v.title.find("attn.qkv/gather_matmul forward: Shard(0) -> Shard(2)"), std::string::npos)
      << v.title;
  EXPECT_NE(v.title.find("all_gather"), std::string::npos) << v.title;
  const LogicalTensorView& x = tensor_named(v, "x (ln1 out)");
  EXPECT_EQ(x.placement, Placement::shard(0));
  EXPECT_EQ(x.global, (Shape{16, 2, 32}));
  expect_bands(x, 4, /*rows=*/true, PieceStyle::shard);  // s/4 = 4 positions each
  EXPECT_EQ(x.pieces[1].tooltip, "rank 1: s 4..8, b 0..2, h 0..32 (1,024 B)");
  EXPECT_EQ(x.pieces[1].outline, theme::kSelection);  // the rank the view is for
  EXPECT_EQ(x.pieces[0].outline, theme::rank_color(0));
  bool rows_label = false;
  for (const Label& l : x.labels) rows_label = rows_label || l.text == "s=16";
  EXPECT_TRUE(rows_label);

  const LogicalTensorView& gathered = tensor_named(v, "x (ln1 out), gathered");
  EXPECT_EQ(gathered.placement, Placement::replicate());
  expect_bands(gathered, 4, true, PieceStyle::replicate);
  EXPECT_NE(gathered.pieces[2].tooltip.find("s 0..16"), std::string::npos);
  EXPECT_NE(gathered.pieces[2].tooltip.find("(4,096 B), a full copy"), std::string::npos)
      << gathered.pieces[2].tooltip;

  const LogicalTensorView& qkv = tensor_named(v, "qkv");
  EXPECT_EQ(qkv.placement, Placement::shard(2));
  expect_bands(qkv, 4, /*rows=*/false, PieceStyle::shard);  // each rank's heads' columns
  expect_bands(tensor_named(v, "W_qkv"), 4, false, PieceStyle::shard);
  EXPECT_TRUE(tensor_named(v, "W_qkv").weight);
}

TEST(ShardView, TpAttnProjWritesAPartialSum) {
  Replay r(record_run("tp", 2));
  ASSERT_TRUE(r.next_collective());  // copy_to_tp is free forward: the first is proj's all-reduce
  const Snapshot s = r.snapshot();
  ASSERT_EQ(s.status[0].scope, "attn.proj");
  const ShardView v = shard_view(s, 0, {800, 500});
  EXPECT_NE(v.title.find("Partial -> Replicate"), std::string::npos) << v.title;
  const LogicalTensorView& partial = tensor_named(v, "attn out partial");
  EXPECT_EQ(partial.role, "writes");
  EXPECT_EQ(partial.placement, Placement::partial());
  expect_bands(partial, 2, true, PieceStyle::partial);
  EXPECT_NE(partial.pieces[0].tooltip.find("partial sum"), std::string::npos);
  expect_bands(tensor_named(v, "attn out"), 2, true, PieceStyle::replicate);
  expect_bands(tensor_named(v, "context (merged)"), 2, false, PieceStyle::shard);
  expect_bands(tensor_named(v, "W_proj"), 2, true, PieceStyle::shard);  // rows of [h, h]
}

TEST(ShardView, UlyssesAllToAllMovesFromSequenceToHeadShards) {
  Replay r(record_run("ulysses", 4));
  ASSERT_TRUE(r.next_collective());
  const ShardView v = shard_view(r.snapshot(), 3, {1000, 700});
  EXPECT_NE(v.title.find("attn.heads/seq_to_heads"), std::string::npos) << v.title;
  EXPECT_NE(v.title.find("all_to_all"), std::string::npos) << v.title;
  const LogicalTensorView& by_seq = tensor_named(v, "q|k|v by sequence");
  EXPECT_EQ(by_seq.placement, Placement::shard(0));
  expect_bands(by_seq, 4, true, PieceStyle::shard);
  const LogicalTensorView& by_head = tensor_named(v, "q|k|v by head");
  EXPECT_EQ(by_head.placement, Placement::shard(2));
  expect_bands(by_head, 4, true, PieceStyle::shard);  // rows are the head dim a
  EXPECT_EQ(by_head.pieces[3].tooltip, "rank 3: s 0..16, b 0..2, a 3..4, d 0..8 (1,024 B)");
  // The reshaped views between ops are left out of the picture.
  for (const LogicalTensorView& t : v.tensors) EXPECT_NE(t.name, "q|k|v chunk");
}

bool inside(const Rect& r, PanelSize size) {
  const float eps = 1e-3f;
  return r.x0 >= -eps && r.y0 >= -eps && r.x1 <= size.width + eps && r.y1 <= size.height + eps &&
         r.x0 <= r.x1 + eps && r.y0 <= r.y1 + eps;
}

bool within(const Rect& inner, const Rect& outer) {
  const float eps = 1e-3f;
  return inner.x0 >= outer.x0 - eps && inner.y0 >= outer.y0 - eps && inner.x1 <= outer.x1 + eps &&
         inner.y1 <= outer.y1 + eps;
}

TEST(ShardView, EverythingLiesInsideThePanelAtAnySize) {
  const PanelSize sizes[] = {{1200, 800}, {640, 360}, {300, 200}, {120, 80}, {40, 30},
                             {10, 10},    {0, 0},     {1, 500},   {500, 1}};
  for (const char* mode : {"tp-sp", "ulysses", "tp"}) {
    Replay r(record_run(mode, 4));
    std::set<std::string> scopes;
    while (r.step_op()) {
      const Snapshot s = r.snapshot();
      scopes.insert(s.status[0].scope);
      for (const PanelSize& size : sizes) {
        const ShardView v = shard_view(s, 0, size);
        for (const LogicalTensorView& t : v.tensors) {
          EXPECT_TRUE(inside(t.frame, size)) << mode << " " << v.title << " " << t.name;
          for (const ShardPiece& p : t.pieces) {
            EXPECT_TRUE(within(p.rect, t.frame)) << mode << " " << v.title << " " << t.name;
          }
          for (const Label& l : t.labels) {
            EXPECT_TRUE(l.x >= 0 && l.y >= 0 && l.x <= size.width && l.y <= size.height)
                << mode << " " << t.name << " label " << l.text;
          }
        }
        // Labels never run into another tensor's column: each ends before any frame to its
        // right on the same rows begins.
        for (const LogicalTensorView& a : v.tensors) {
          for (const Label& l : a.labels) {
            const float end = l.x + theme::kApproxCharWidth * static_cast<float>(l.text.size());
            for (const LogicalTensorView& b : v.tensors) {
              if (&a == &b || b.frame.x0 < a.frame.x1) continue;
              const bool same_rows =
                  l.y < b.frame.y1 && l.y + theme::kLabelHeight > b.frame.y0 - theme::kLabelHeight;
              EXPECT_FALSE(same_rows && end > b.frame.x0 + 0.5f)
                  << mode << " " << v.title << ": '" << l.text << "' runs into " << b.name;
            }
          }
        }
        for (std::size_t i = 0; i < v.tensors.size(); ++i) {  // frames never overlap
          for (std::size_t j = i + 1; j < v.tensors.size(); ++j) {
            const Rect& a = v.tensors[i].frame;
            const Rect& b = v.tensors[j].frame;
            EXPECT_TRUE(a.x1 <= b.x0 || b.x1 <= a.x0 || a.y1 <= b.y0 || b.y1 <= a.y0)
                << mode << " " << v.title << ": " << v.tensors[i].name << " and "
                << v.tensors[j].name;
          }
        }
      }
      // At a real size every tensor of the module is drawn.
      const ShardView big = shard_view(s, 0, {1200, 800});
      EXPECT_FALSE(has_note(big, "too small")) << mode << " " << big.title;
    }
    EXPECT_GE(scopes.size(), 16u) << mode;
  }
}

TEST(ShardView, NotesWhenThereIsNoOpToShow) {
  const TraceFile t = record_run("tp", 2);
  const ShardView before = shard_view(testing::snapshot_at(t, 0), 0, {600, 400});
  EXPECT_TRUE(before.tensors.empty());
  EXPECT_TRUE(has_note(before, "no op yet"));
  const ShardView missing = shard_view(testing::snapshot_at(t, 0), 7, {600, 400});
  EXPECT_TRUE(has_note(missing, "no rank 7"));
  // The reference check's collectives run outside the layer's modules.
  Replay r(t);
  bool outside = false;
  while (!outside && r.next_collective()) {
    const Snapshot s = r.snapshot();
    const RankStatus& st = s.status[0];
    if (st.state == RankStatus::State::finished || st.op.empty() || has_module_layout(st.scope))
      continue;
    const ShardView v = shard_view(s, 0, {600, 400});
    EXPECT_TRUE(v.tensors.empty()) << st.where;
    EXPECT_TRUE(has_note(v, "outside the layer's modules")) << st.where;
    outside = true;
  }
  EXPECT_TRUE(outside) << "no collective outside the modules";
  // At the end every rank has finished, and the panel keeps the layout of its last op in the
  // layer (issue 19: it went blank), not the check's collectives after it.
  const ShardView end = shard_view(testing::snapshot_at(t), 0, {600, 400});
  EXPECT_FALSE(end.tensors.empty());
  EXPECT_TRUE(has_note(end, "has finished"));
  EXPECT_NE(end.title.find("backward"), std::string::npos) << end.title;
}

TEST(ShardView, BackwardAndGradReduceShowGradients) {
  Replay r(record_run("ulysses", 2));
  Snapshot s;
  bool reached = false;
  while (r.next_collective()) {
    s = r.snapshot();
    if (s.status[0].scope == "grad_reduce") {
      reached = true;
      break;
    }
  }
  ASSERT_TRUE(reached);
  const ShardView v = shard_view(s, 0, {1200, 900});
  EXPECT_EQ(v.tensors.size(), 12u);  // Ulysses sums every replicated parameter's gradient
  EXPECT_NE(v.title.find("grad_reduce"), std::string::npos) << v.title;
  EXPECT_NE(v.title.find("backward"), std::string::npos) << v.title;
  for (const LogicalTensorView& t : v.tensors) {
    EXPECT_EQ(t.placement, Placement::partial()) << t.name;
    EXPECT_TRUE(t.weight) << t.name;
  }
}

// A stack of 3 stopped at layer 1's all-gather before QKV: the view shows layer 1's module with
// layer 1's weights (layers.1.*), says so, and with the selector on layer 2, layer 2's weights
// and that the op is in layer 1.
TEST(ShardView, AStackShowsTheSelectedLayersParameters) {
  Replay r(testing::record_stack("tp-sp", 2, 3));
  Snapshot s;
  while (r.next_collective()) {
    s = r.snapshot();
    if (s.status[0].layer == 1 && s.status[0].scope == "attn.qkv") break;
  }
  ASSERT_EQ(s.status[0].layer, 1) << s.status[0].where;
  const ShardView own = shard_view(s, 0, {900, 600});
  EXPECT_EQ(own.title.rfind("layer 1: attn.qkv/gather_matmul forward", 0), 0u) << own.title;
  EXPECT_TRUE(has_note(own, "layer 1 of 3: parameters layers.1.*"));
  EXPECT_FALSE(has_note(own, "shown: its module in layer"));
  const LogicalTensorView& w = tensor_named(own, "W_qkv");
  EXPECT_EQ(w.parameter, "layers.1.attn.qkv.weight");
  EXPECT_EQ(w.pieces[1].tooltip.rfind("layers.1.attn.qkv.weight\nrank 1: ", 0), 0u)
      << w.pieces[1].tooltip;
  EXPECT_EQ(tensor_named(own, "x (ln1 out)").parameter, "") << "an activation";

  const ShardView picked = shard_view(s, 0, {900, 600}, 2);
  EXPECT_EQ(tensor_named(picked, "W_qkv").parameter, "layers.2.attn.qkv.weight");
  EXPECT_EQ(tensor_named(picked, "b_qkv").parameter, "layers.2.attn.qkv.bias");
  EXPECT_TRUE(has_note(picked, "rank 0's op is in layer 1; shown: its module in layer 2"));
  EXPECT_TRUE(has_note(picked, "layer 2 of 3: parameters layers.2.*"));
  EXPECT_EQ(tensor_named(shard_view(s, 0, {900, 600}, 0), "W_qkv").parameter,
            "layers.0.attn.qkv.weight");

  const ShardView none = shard_view(s, 0, {900, 600}, 3);
  EXPECT_TRUE(none.tensors.empty());
  EXPECT_TRUE(has_note(none, "no layer 3 in this stack of 3 layers"));
}

// A single layer keeps the layer's names and says nothing of layers.
TEST(ShardView, ASingleLayerNamesItsParametersAsTheLayerDoes) {
  Replay r(record_run("tp-sp", 2));
  ASSERT_TRUE(r.next_collective());
  const ShardView v = shard_view(r.snapshot(), 0, {900, 600});
  EXPECT_EQ(v.title.rfind("attn.qkv/", 0), 0u) << v.title;
  EXPECT_EQ(tensor_named(v, "W_qkv").parameter, "attn.qkv.weight");
  EXPECT_FALSE(has_note(v, "layer"));
}

TEST(ShardView, PieceUnderTheMouse) {
  Replay r(record_run("tp-sp", 4));
  ASSERT_TRUE(r.next_collective());
  const ShardView v = shard_view(r.snapshot(), 0, {900, 600});
  const LogicalTensorView& x = tensor_named(v, "x (ln1 out)");
  const Rect& piece = x.pieces[2].rect;
  const ShardPiece* hit = shard_piece_at(v, (piece.x0 + piece.x1) / 2, (piece.y0 + piece.y1) / 2);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->rank, 2);
  EXPECT_EQ(hit->tooltip, "rank 2: s 8..12, b 0..2, h 0..32 (1,024 B)");
  EXPECT_EQ(shard_piece_at(v, -5, -5), nullptr);
}

}  // namespace
}  // namespace shardscope::viz
