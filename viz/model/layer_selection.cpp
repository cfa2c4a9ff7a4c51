// The layer selector's default: the focused rank's current layer.
#include "viz/model/layer_selection.h"

#include <algorithm>

namespace shardscope::viz {

std::optional<int> current_layer(const Snapshot& s, int rank) {
  const auto st = std::find_if(s.status.begin(), s.status.end(),
                               [&](const RankStatus& x) { return x.rank == rank; });
  if (st == s.status.end()) return std::nullopt;
  if (st->state != RankStatus::State::finished) {
    if (st->layer < 0) return std::nullopt;
    return st->layer;
  }
  // A finished rank (a live one has no op left): its last op or collective in a layer.
  for (auto e = s.events.rbegin(); e != s.events.rend(); ++e) {
    if (e->rank == rank && e->layer >= 0 &&
        (e->kind == TraceEventKind::op || e->kind == TraceEventKind::collective)) {
      return e->layer;
    }
  }
  return std::nullopt;
}

int shown_layer(const Snapshot& s, int rank, const LayerSelection& selection) {
  int layer = selection.layer;
  if (selection.follow) layer = current_layer(s, rank).value_or(selection.layer);
  return std::clamp(layer, 0, std::max(1, s.config.layers) - 1);
}

}  // namespace shardscope::viz
