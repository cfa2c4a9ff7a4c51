// The layer selector: which layer of a stack (LayerConfig::layers > 1) the memory and shard panels
// show. By default it follows the focused rank: the layer of the op the rank is at, staying on
// the last one while the rank is outside every layer (the loss, the check); a person may pick
// another layer, which then stays until they tick "follow op" again. Nothing here knows ImGui.
#pragma once

#include <optional>

#include "viz/model/snapshot.h"

namespace shardscope::viz {

struct LayerSelection {
  bool follow = true;  // show the layer of the focused rank's current op
  int layer = 0;       // the layer shown (following: the last one the rank was in)
};

// The layer of the op `rank` is at (RankStatus::layer); for a rank that has finished, of its last
// op in a layer. nullopt outside every layer (the loss, the check), before its first op, and for
// a rank the snapshot does not have.
std::optional<int> current_layer(const Snapshot& s, int rank);

// The layer to show for `rank`: following, current_layer(s, rank), or selection.layer while the
// rank is outside every layer; else selection.layer. Clamped to [0, config.layers).
int shown_layer(const Snapshot& s, int rank, const LayerSelection& selection);

}  // namespace shardscope::viz
