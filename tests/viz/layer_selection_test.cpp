// The layer selector on a replayed stack of 3 layers: by default it follows the layer of the
// focused rank's op as the ranks step (forward 0, 1, 2, backward 2, 1, 0, then tp-sp's gradient
// reductions 0, 1, 2), stays on the last layer while the rank is outside every layer (the loss,
// the check), keeps a picked layer, and names the last layer of a finished rank.
#include <gtest/gtest.h>

#include <vector>

#include "tests/viz/viz_testing.h"
#include "viz/model/layer_selection.h"

namespace shardscope::viz {
namespace {

const TraceFile& tp_stack() {
  static const TraceFile trace = testing::record_stack("tp", 2, 3);
  return trace;
}

// The layers shown to `rank` while following as `move` steps the replay to the end, each run of
// equal ones once; `outside` counts the stops outside every layer.
template <class Move>
std::vector<int> layers_followed(const TraceFile& trace, int rank, Move move, int& outside) {
  Replay r(trace);
  LayerSelection follow;
  std::vector<int> visited;
  while (move(r)) {
    const Snapshot s = r.snapshot();
    const RankStatus& st = s.status[static_cast<std::size_t>(rank)];
    if (st.state == RankStatus::State::finished) break;
    const int shown = shown_layer(s, rank, follow);
    if (st.layer >= 0) {
      EXPECT_EQ(shown, st.layer) << st.where;
      EXPECT_NE(st.summary.find(", layer " + std::to_string(st.layer)), std::string::npos)
          << st.summary;
      EXPECT_NE(st.where.find("(layer " + std::to_string(st.layer) + ", "), std::string::npos)
          << st.where;
    } else {
      ++outside;
      EXPECT_EQ(shown, follow.layer) << "outside every layer the last one stays: " << st.where;
    }
    follow.layer = shown;  // as the panels keep it
    if (visited.empty() || visited.back() != shown) visited.push_back(shown);
  }
  return visited;
}

// Op by op through tp: forward through layers 0, 1, 2, backward through 2, 1, 0.
TEST(LayerSelection, FollowsTheLayerOfTheFocusedRanksOpAsTheRanksStep) {
  for (int rank : {0, 1}) {
    int outside = 0;
    const std::vector<int> visited = layers_followed(
        tp_stack(), rank, [](Replay& r) { return r.step_op(); }, outside);
    EXPECT_EQ(visited, (std::vector<int>{0, 1, 2, 1, 0})) << "rank " << rank;
  }
}

// Collective by collective through tp-sp: the loss's all-reduce (in no layer) keeps layer 2, and
// after the backward each layer's gradients are reduced, layer 0 first.
TEST(LayerSelection, StaysOnTheLastLayerAtTheLossAndFollowsTheGradientReductions) {
  const TraceFile trace = testing::record_stack("tp-sp", 2, 3);
  for (int rank : {0, 1}) {
    int outside = 0;
    const std::vector<int> visited = layers_followed(
        trace, rank, [](Replay& r) { return r.next_collective(); }, outside);
    EXPECT_EQ(visited, (std::vector<int>{0, 1, 2, 1, 0, 1, 2})) << "rank " << rank;
    EXPECT_GT(outside, 0) << "the loss's all-reduce and the check run in no layer";
  }
}

TEST(LayerSelection, APickedLayerStaysAsTheRanksStep) {
  Replay r(tp_stack());
  const LayerSelection picked{false, 2};
  while (r.step_op()) {
    const Snapshot s = r.snapshot();
    ASSERT_EQ(shown_layer(s, 0, picked), 2) << s.status[0].where;
  }
  // Out of the stack: clamped to its layers.
  const Snapshot s = r.snapshot();
  EXPECT_EQ(shown_layer(s, 0, LayerSelection{false, 7}), 2);
  EXPECT_EQ(shown_layer(s, 0, LayerSelection{false, -1}), 0);
}

TEST(LayerSelection, AFinishedRankShowsItsLastLayerAndAnUnknownRankNone) {
  const Snapshot end = testing::snapshot_at(tp_stack());
  ASSERT_TRUE(end.finished);
  // tp reduces no gradients: the backward's last op is layer 0's ln1.
  EXPECT_EQ(current_layer(end, 0), 0);
  EXPECT_EQ(shown_layer(end, 0, LayerSelection{true, 2}), 0);
  EXPECT_EQ(current_layer(end, 9), std::nullopt);
  const Snapshot start = testing::snapshot_at(tp_stack(), 0);
  EXPECT_EQ(current_layer(start, 0), std::nullopt) << "no op yet";
  EXPECT_EQ(shown_layer(start, 0, LayerSelection{true, 1}), 1);
}

// A stack of one: the layer is always 0 and no summary names it.
TEST(LayerSelection, ASingleLayerIsLayerZero) {
  Replay r(testing::record_run("tp", 2));
  ASSERT_TRUE(r.next_collective());
  const Snapshot s = r.snapshot();
  EXPECT_EQ(s.status[0].layer, 0);
  EXPECT_EQ(s.status[0].summary, "step 0, forward");
  EXPECT_EQ(shown_layer(s, 0, {}), 0);
  EXPECT_EQ(shown_layer(s, 0, LayerSelection{false, 1}), 0);
}

}  // namespace
}  // namespace shardscope::viz
