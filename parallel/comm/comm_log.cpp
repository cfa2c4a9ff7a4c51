// CommLog: the collectives of a run, summed per layer, kind, phase and purpose.
#include "parallel/comm/comm_log.h"

namespace shardscope {

void CommLog::on_collective(const CollectiveEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (CommLine& line : lines_) {
    if (line.layer == e.site.layer && line.kind == e.kind && line.phase == e.site.phase &&
        line.purpose == e.purpose) {
      ++line.count;
      line.bytes_sent += e.bytes_sent;
      return;
    }
  }
  lines_.push_back({e.site.layer, e.kind, e.site.phase, e.purpose, 1, e.bytes_sent});
}

std::vector<CommLine> CommLog::lines() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_;
}

void CommLog::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  lines_.clear();
}

}  // namespace shardscope
