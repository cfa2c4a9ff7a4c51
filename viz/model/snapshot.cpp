// Names of the snapshot's enums.
#include "viz/model/snapshot.h"

namespace shardscope::viz {

const char* rank_state_name(RankStatus::State s) {
  switch (s) {
    case RankStatus::State::not_started:
      return "not started";
    case RankStatus::State::running:
      return "running";
    case RankStatus::State::paused:
      return "paused";
    case RankStatus::State::in_collective:
      return "in collective";
    case RankStatus::State::finished:
      return "finished";
  }
  return "?";
}

}  // namespace shardscope::viz
