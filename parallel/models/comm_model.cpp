// The ring formulas.
#include "parallel/models/comm_model.h"

namespace shardscope {

double ring_full_bytes(CollectiveKind kind, std::int64_t count, std::size_t element_bytes, int t) {
  const double bytes = static_cast<double>(count) * static_cast<double>(element_bytes);
  return kind == CollectiveKind::all_gather ? bytes * t : bytes;
}

double ring_bytes_sent(CollectiveKind kind, double full_bytes, int t) {
  if (t <= 1) return 0.0;
  const double share = static_cast<double>(t - 1) / static_cast<double>(t);
  switch (kind) {
    case CollectiveKind::all_reduce:
      return 2.0 * share * full_bytes;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
      return share * full_bytes;
    case CollectiveKind::broadcast:
      return full_bytes;
    case CollectiveKind::barrier:
      return 0.0;
  }
  return 0.0;
}

}  // namespace shardscope
