// CommLog: an observer that tallies the collectives of one rank by layer, kind, phase and
// purpose; and the analytic communication model of one layer per mode, in the same lines, so
// the two can be set side by side. Bytes are per rank, by the ring formulas of comm_model.h.
#pragma once

#include <mutex>
#include <vector>

#include "autograd/observer.h"
#include "parallel/layers/layer_config.h"

namespace shardscope {

struct CommLine {
  int layer = -1;
  CollectiveKind kind = CollectiveKind::barrier;
  Phase phase = Phase::forward;
  CommPurpose purpose = CommPurpose::activation;
  int count = 0;
  double bytes_sent = 0;  // per rank, summed over the calls
};

class CommLog final : public Observer {
 public:
  void on_collective(const CollectiveEvent& e) override;
  std::vector<CommLine> lines() const;  // in the order each line first appeared
  void clear();

 private:
  mutable std::mutex mutex_;
  std::vector<CommLine> lines_;
};

}  // namespace shardscope
